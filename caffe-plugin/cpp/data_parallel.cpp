#include "data_parallel.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/shared_ptr.hpp>
#include <boost/weak_ptr.hpp>
#include <glog/logging.h>

#include "caffe/blob.hpp"
#include "caffe/net.hpp"
#include "caffe/solver.hpp"
#include "caffe/syncedmem.hpp"
#include "mpi_session.hpp"
#include "real_function.hpp"

namespace lmdbio_caffe {
namespace {

using Blob = caffe::Blob<float>;
using Net = caffe::Net<float>;
using Solver = caffe::Solver<float>;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

enum class Reduce { Layerwise, Fused };

// LMDBIO_CAFFE_ALLREDUCE: unset, 1 or layer: per layer during the backward
// pass; fused: once after it. (0 never gets here: data_parallel_enabled.)
Reduce reduce_mode(int iter_size) {
  const char* v = std::getenv("LMDBIO_CAFFE_ALLREDUCE");
  const std::string mode = v == nullptr ? "" : v;
  CHECK(mode.empty() || mode == "1" || mode == "layer" || mode == "fused")
      << "LMDBIO_CAFFE_ALLREDUCE must be 0, 1, layer or fused, got \"" << mode << "\"";
  // With iter_size > 1 a backward pass adds to the diffs of the ones
  // before it: only the sum after the last one may be averaged.
  if (mode == "fused" || iter_size > 1) return Reduce::Fused;
  return Reduce::Layerwise;
}

// Completes `requests` (and empties the list). A rank blocked in MPI spins
// on its core; when ranks share cores (more ranks than cores, or other work
// on the node) that spinning takes the time the rank it waits for needs.
// So after a short spin this polls with sleeps of up to 100 microseconds,
// small against an iteration's milliseconds.
void complete(std::vector<MPI_Request>* requests) {
  const Clock::time_point start = Clock::now();
  long pause_us = 0;
  for (;;) {
    int done = 0;
    MPI_Testall(static_cast<int>(requests->size()), requests->data(), &done, MPI_STATUSES_IGNORE);
    if (done) break;
    if (Clock::now() - start < std::chrono::microseconds(20)) continue;
    pause_us = std::min<long>(pause_us + 10, 100);
    std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
  }
  requests->clear();
}

// An in-place sum over `comm`, completed as in complete().
void sum_in_place(float* values, size_t count, MPI_Comm comm) {
  std::vector<MPI_Request> request(1);
  MPI_Iallreduce(MPI_IN_PLACE, values, static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm,
                 &request[0]);
  complete(&request);
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

class DataParallel;

// The nets whose Forward is averaged, and their solver's DataParallel. A
// weak pointer tells a live net from a new one at a freed net's address.
struct NetEntry {
  DataParallel* owner;
  boost::weak_ptr<Net> net;
  bool train;
};

std::mutex registry_mutex;

std::map<const Net*, NetEntry>& registry() {
  static std::map<const Net*, NetEntry>* nets = new std::map<const Net*, NetEntry>();
  return *nets;
}

void register_net(const boost::shared_ptr<Net>& net, DataParallel* owner, bool train) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  registry()[net.get()] = NetEntry{owner, boost::weak_ptr<Net>(net), train};
}

DataParallel* owner_of(const Net* net, bool* train) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = registry().find(net);
  if (it == registry().end()) return nullptr;
  const boost::shared_ptr<Net> alive = it->second.net.lock();
  if (!alive || alive.get() != net) {
    registry().erase(it);
    return nullptr;
  }
  *train = it->second.train;
  return it->second.owner;
}

// One solver's data-parallel state. Never freed: the solver's and the train
// net's callback lists keep pointers to it, and the learnable blobs' diffs
// point into its buffer, for as long as they live.
class DataParallel final : public Solver::Callback, public Net::Callback {
 public:
  static DataParallel* of(Solver* solver) {
    for (Solver::Callback* c : solver->callbacks()) {
      if (DataParallel* dp = dynamic_cast<DataParallel*>(c)) return dp;
    }
    return nullptr;
  }

  // Collective: every rank attaches in its first Step.
  explicit DataParallel(Solver* solver) : solver_(solver) {
    // The main thread calls MPI here while the LMDBIOData layer's prefetch
    // thread may be in the engine.
    CHECK_EQ(mpi_thread_level(), static_cast<int>(MPI_THREAD_MULTIPLE))
        << "libcaffe_lmdbio: data-parallel training needs MPI_THREAD_MULTIPLE (MPI was "
           "initialised with less); LMDBIO_CAFFE_ALLREDUCE=0 trains one model per rank instead";
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &ranks_);
    Net* net = solver->net().get();
    mode_ = reduce_mode(solver->param().iter_size());
    plan_buffer(*net);
    check_same_net_everywhere();
    snapshot_all_ranks_ = env_flag("LMDBIO_CAFFE_SNAPSHOT_ALL_RANKS");
    if (snapshot_all_ranks_ && rank_ > 0) {
      // The solver is not const; param() only hands out a const view.
      caffe::SolverParameter& param = const_cast<caffe::SolverParameter&>(solver->param());
      param.set_snapshot_prefix(param.snapshot_prefix() + "_rank" + std::to_string(rank_));
    }
    solver->add_callback(this);
    net->add_after_backward(this);
    register_net(solver->net(), this, true);
    for (const boost::shared_ptr<Net>& test : solver->test_nets()) register_net(test, this, false);
    LOG(INFO) << "lmdbio: data-parallel training on " << ranks_ << " ranks: "
              << net->learnable_params().size() << " learnable blobs (" << total_ * sizeof(float)
              << " bytes) averaged "
              << (mode_ == Reduce::Layerwise ? "layer by layer during the backward pass"
                                             : "in one allreduce after the backward pass")
              << "; losses and test scores are averages over the ranks";
  }

  // Rank 0's parameters everywhere, before the first iteration (and its
  // test) of this solver: after Caffe has initialised, restored or loaded
  // them.
  void before_step() {
    step_start_ = Clock::now();
    step_iterations_ = 0;
    step_reduce_seconds_ = 0;
    step_forward_seconds_ = 0;
    if (broadcast_done_) return;
    const Clock::time_point t = Clock::now();
    for (Blob* blob : solver_->net()->learnable_params()) {
      MPI_Bcast(blob->mutable_cpu_data(), blob->count(), MPI_FLOAT, 0, comm_);
    }
    broadcast_done_ = true;
    LOG(INFO) << "lmdbio: rank 0's parameters broadcast in " << seconds_since(t) * 1e3 << " ms";
  }

  void after_step(int iters) {
    if (iters <= 1 || step_iterations_ == 0) return;
    const double wall = seconds_since(step_start_);
    const double per = 1e3 / step_iterations_;
    LOG(INFO) << "lmdbio: data-parallel on " << ranks_ << " ranks: " << step_iterations_
              << " iterations in " << wall << " s, " << wall * per
              << " ms per iteration, of which " << step_reduce_seconds_ * per
              << " ms in the gradient allreduce (" << (mode_ == Reduce::Layerwise ? "layer" : "fused")
              << ") and " << step_forward_seconds_ * per
              << " ms averaging losses and outputs (this rank's wait for the others included)";
  }

  // Averages the loss and the outputs of a forward pass over the ranks.
  void after_forward(Net* net, bool train, float* loss) {
    const Clock::time_point t = Clock::now();
    const std::vector<Blob*>& outputs = net->output_blobs();
    std::vector<float> values(1, loss != nullptr ? *loss : 0.0f);
    for (const Blob* blob : outputs) {
      values.insert(values.end(), blob->cpu_data(), blob->cpu_data() + blob->count());
    }
    sum_in_place(values.data(), values.size(), comm_);
    const float inverse = 1.0f / ranks_;
    for (float& v : values) v *= inverse;
    if (loss != nullptr) *loss = values[0];
    if (train) {
      // A layer's backward pass may read its top's data: the averages
      // replace the outputs once the backward pass is over (run(0)).
      train_outputs_.assign(values.begin() + 1, values.end());
      train_outputs_pending_ = true;
    } else {
      write_outputs(net, values.data() + 1);
    }
    step_forward_seconds_ += seconds_since(t);
  }

  bool writes_snapshots() const { return rank_ == 0 || snapshot_all_ranks_; }

 protected:
  void on_start() override {
    CHECK(requests_.empty());
    std::fill(group_started_.begin(), group_started_.end(), false);
  }

  // After layer `layer`'s backward pass: start averaging the blobs whose
  // diffs are now final; otherwise let MPI progress the ones started.
  void run(int layer) override {
    const Clock::time_point t = Clock::now();
    const int g = mode_ == Reduce::Layerwise ? group_of_layer_[layer] : -1;
    if (g >= 0) {
      requests_.emplace_back();
      MPI_Iallreduce(MPI_IN_PLACE, buffer_ + groups_[g].offset, static_cast<int>(groups_[g].count),
                     MPI_FLOAT, MPI_SUM, comm_, &requests_.back());
      group_started_[g] = true;
    } else if (!requests_.empty()) {
      int done = 0;
      MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done,
                  MPI_STATUSES_IGNORE);
    }
    step_reduce_seconds_ += seconds_since(t);
    if (layer == 0 && train_outputs_pending_) {
      write_outputs(solver_->net().get(), train_outputs_.data());
      train_outputs_pending_ = false;
    }
  }

  void on_gradients_ready() override {
    const Clock::time_point t = Clock::now();
    if (mode_ == Reduce::Layerwise) {
      complete(&requests_);
      // A layer whose callback did not come (a partial backward pass).
      for (size_t g = 0; g < groups_.size(); ++g) {
        if (!group_started_[g]) sum_in_place(buffer_ + groups_[g].offset, groups_[g].count, comm_);
      }
    } else {
      sum_in_place(buffer_, total_, comm_);
    }
    const float inverse = 1.0f / ranks_;
    for (size_t i = 0; i < total_; ++i) buffer_[i] *= inverse;
    step_reduce_seconds_ += seconds_since(t);
    ++step_iterations_;
  }

 private:
  // The learnable blobs whose diffs are final once one layer's backward
  // pass is over: a slice of the buffer.
  struct Group {
    size_t offset;
    size_t count;
  };

  // Lays the learnable blobs' diffs out in one buffer in the order the
  // backward pass finishes them (top layer first), and points the diffs
  // into it. A shared blob is final after the lowest layer using it.
  void plan_buffer(Net& net) {
    const std::vector<boost::shared_ptr<Blob> >& params = net.params();
    const std::vector<int>& owners = net.param_owners();
    const std::vector<Blob*>& learnable = net.learnable_params();
    std::map<const Blob*, size_t> learnable_index;
    for (size_t i = 0; i < learnable.size(); ++i) learnable_index[learnable[i]] = i;
    std::map<const Blob*, size_t> param_index;
    for (size_t k = 0; k < params.size(); ++k) param_index[params[k].get()] = k;

    const int layers = static_cast<int>(net.layers().size());
    std::vector<int> final_after(learnable.size(), INT_MAX);
    for (int layer = 0; layer < layers; ++layer) {
      for (const boost::shared_ptr<Blob>& blob : net.layers()[layer]->blobs()) {
        auto k = param_index.find(blob.get());
        if (k == param_index.end()) continue;
        const size_t owner = owners[k->second] < 0 ? k->second : owners[k->second];
        auto l = learnable_index.find(params[owner].get());
        CHECK(l != learnable_index.end()) << "lmdbio: a parameter with no learnable owner";
        final_after[l->second] = std::min(final_after[l->second], layer);
      }
    }
    for (int& f : final_after) {
      if (f == INT_MAX) f = 0;  // not in any layer's list: final at the end
    }

    group_of_layer_.assign(layers, -1);
    std::vector<size_t> order;
    for (int layer = layers - 1; layer >= 0; --layer) {
      size_t count = 0;
      for (size_t i = 0; i < learnable.size(); ++i) {
        if (final_after[i] != layer) continue;
        order.push_back(i);
        count += learnable[i]->count();
      }
      if (count == 0) continue;
      group_of_layer_[layer] = static_cast<int>(groups_.size());
      groups_.push_back(Group{total_, count});
      total_ += count;
    }
    group_started_.assign(groups_.size(), false);

    // Aligned for the BLAS that reads the diffs; at least one float.
    const size_t bytes = ((std::max<size_t>(total_, 1) * sizeof(float) + 63) / 64) * 64;
    void* memory = nullptr;
    CHECK_EQ(posix_memalign(&memory, 64, bytes), 0)
        << "lmdbio: cannot allocate " << bytes << " bytes for gradients";
    buffer_ = static_cast<float*>(memory);
    size_t offset = 0;
    for (size_t i : order) {
      Blob* blob = learnable[i];
      std::memcpy(buffer_ + offset, blob->cpu_diff(), blob->count() * sizeof(float));
      // Shared blobs share this SyncedMemory, so all of them follow.
      blob->diff()->set_cpu_data(buffer_ + offset);
      offset += blob->count();
    }
  }

  // Ranks built from different prototxt would exchange unrelated buffers.
  void check_same_net_everywhere() {
    long long mine[2] = {static_cast<long long>(total_), -static_cast<long long>(total_)};
    long long all[2] = {0, 0};
    MPI_Allreduce(mine, all, 2, MPI_LONG_LONG, MPI_MAX, comm_);
    CHECK(all[0] == -all[1]) << "lmdbio: the ranks' nets differ (" << -all[1] << " to " << all[0]
                             << " learnable values); every rank must train the same net";
  }

  static void write_outputs(Net* net, const float* values) {
    for (Blob* blob : net->output_blobs()) {
      std::memcpy(blob->mutable_cpu_data(), values, blob->count() * sizeof(float));
      values += blob->count();
    }
  }

  Solver* solver_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int ranks_ = 1;
  Reduce mode_ = Reduce::Layerwise;
  bool snapshot_all_ranks_ = false;
  bool broadcast_done_ = false;
  float* buffer_ = nullptr;
  size_t total_ = 0;
  std::vector<Group> groups_;
  std::vector<int> group_of_layer_;
  std::vector<bool> group_started_;
  std::vector<MPI_Request> requests_;
  std::vector<float> train_outputs_;
  bool train_outputs_pending_ = false;
  Clock::time_point step_start_;
  long step_iterations_ = 0;
  double step_reduce_seconds_ = 0;
  double step_forward_seconds_ = 0;
};

}  // namespace
}  // namespace lmdbio_caffe

extern "C" void lmdbio_caffe_solver_step(void* s, int iters) {
  using namespace lmdbio_caffe;
  typedef void (*Step)(Solver*, int);
  static const Step real = real_function<Step>("_ZN5caffe6SolverIfE4StepEi", "Solver<float>::Step");
  Solver* solver = static_cast<Solver*>(s);
  ensure_mpi(false);
  DataParallel* dp = nullptr;
  if (data_parallel_enabled()) {
    dp = DataParallel::of(solver);
    if (dp == nullptr) dp = new DataParallel(solver);
    dp->before_step();
  }
  real(solver, iters);
  if (dp != nullptr) dp->after_step(iters);
}

extern "C" const void* lmdbio_caffe_net_forward(void* n, float* loss) {
  using namespace lmdbio_caffe;
  // Returns const std::vector<Blob<float>*>&: a pointer in the ABI.
  typedef const std::vector<Blob*>* (*Forward)(Net*, float*);
  static const Forward real =
      real_function<Forward>("_ZN5caffe3NetIfE7ForwardEPf", "Net<float>::Forward(float*)");
  Net* net = static_cast<Net*>(n);
  const std::vector<Blob*>* outputs = real(net, loss);
  bool train = false;
  if (DataParallel* dp = owner_of(net, &train)) dp->after_forward(net, train, loss);
  return outputs;
}

extern "C" void lmdbio_caffe_solver_snapshot(void* s) {
  using namespace lmdbio_caffe;
  typedef void (*Snapshot)(Solver*);
  static const Snapshot real =
      real_function<Snapshot>("_ZN5caffe6SolverIfE8SnapshotEv", "Solver<float>::Snapshot");
  Solver* solver = static_cast<Solver*>(s);
  const DataParallel* dp = DataParallel::of(solver);
  if (dp != nullptr && !dp->writes_snapshots()) return;
  real(solver);
}
