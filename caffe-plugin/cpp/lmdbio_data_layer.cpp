#include "lmdbio_data_layer.hpp"

#include <dlfcn.h>
#include <mpi.h>

#include <boost/thread/exceptions.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include <glog/logging.h>

#include "caffe/layer_factory.hpp"
#include "key_log.hpp"
#include "mpi_session.hpp"

namespace lmdbio_caffe {
namespace {

// A positive count from the environment, or 0 when unset.
size_t env_count(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  CHECK(*end == '\0' && n > 0) << name << " must be a positive number, got \"" << v << "\"";
  return static_cast<size_t>(n);
}

// Whether a layer of this process holds the engine (see the header).
std::mutex engine_slot_mutex;
bool engine_slot_taken = false;

bool claim_engine_slot() {
  std::lock_guard<std::mutex> lock(engine_slot_mutex);
  if (engine_slot_taken) return false;
  engine_slot_taken = true;
  return true;
}

void release_engine_slot() {
  std::lock_guard<std::mutex> lock(engine_slot_mutex);
  engine_slot_taken = false;
}

std::string printable_key(const lmdbio_record& record) {
  const char* k = static_cast<const char*>(record.key);
  return std::string(k, record.key_len);
}

}  // namespace

template <typename Dtype>
LmdbioDataLayer<Dtype>::LmdbioDataLayer(const caffe::LayerParameter& param)
    : caffe::BasePrefetchingDataLayer<Dtype>(param),
      engine_(nullptr),
      reader_(nullptr),
      pending_(),
      has_pending_(false) {}

template <typename Dtype>
LmdbioDataLayer<Dtype>::~LmdbioDataLayer() {
  // The prefetch thread stops only once every batch the free queue held is
  // loaded, i.e. after the same number of engine steps on every rank (see
  // InternalThreadEntry), so the collective close below meets every rank.
  this->StopInternalThread();
  pool_.reset();
  lmdbio_caffe_reader_free(reader_);
  if (engine_ == nullptr) return;
  lmdbio_counters c;
  if (lmdbio_counters_get(engine_, &c) == LMDBIO_OK) {
    LOG(INFO) << "LMDBIOData " << this->layer_param_.name() << ": " << source_ << ": "
              << c.records_delivered << " records delivered, " << c.bytes_read
              << " bytes read by this rank in " << c.read_requests << " requests ("
              << c.file_opens << " file opens, " << c.direct_read_requests << " direct), "
              << c.wait_seconds << " s waiting";
  }
  if (lmdbio_close(engine_) != LMDBIO_OK) {
    LOG(ERROR) << "LMDBIOData: closing " << source_ << ": " << lmdbio_last_error();
  }
  release_engine_slot();
}

template <typename Dtype>
void LmdbioDataLayer<Dtype>::DataLayerSetUp(const std::vector<caffe::Blob<Dtype>*>& bottom,
                                            const std::vector<caffe::Blob<Dtype>*>& top) {
  (void)bottom;
  const caffe::DataParameter& param = this->layer_param_.data_param();
  source_ = param.source();
  const int batch_size = param.batch_size();
  CHECK_GT(batch_size, 0) << "LMDBIOData " << this->layer_param_.name()
                          << ": data_param.batch_size must be positive";
  // data_param's backend defaults to LEVELDB; only an explicit one is refused.
  CHECK(!param.has_backend() || param.backend() == caffe::DataParameter_DB_LMDB)
      << "LMDBIOData " << this->layer_param_.name() << " reads LMDB only (" << source_
      << " is given as LEVELDB)";

  ensure_mpi(true);
  // The engine is called from the prefetch thread, never at the same time
  // as from the main thread (open before it starts, close after it stops);
  // with MPI_THREAD_MULTIPLE (what the plugin asks for) the engine also
  // reads ahead on a helper thread.
  CHECK_GE(mpi_thread_level(), static_cast<int>(MPI_THREAD_SERIALIZED))
      << "LMDBIOData needs at least MPI_THREAD_SERIALIZED; MPI was initialised with less";

  int rank = 0, ranks = 1;
  uint64_t records = 0;
  if (claim_engine_slot()) {
    open_engine(batch_size, &rank, &ranks, &records);
  } else {
    open_share_reader(&rank, &ranks, &records);
  }

  // Like the stock layer, take the shape from the first record; the batch
  // read for it is the first one delivered.
  next_batch(&pending_);
  has_pending_ = true;
  caffe::Datum datum;
  parse_datum(pending_.records[0], &datum);
  std::vector<int> shape = this->data_transformer_->InferBlobShape(datum);
  this->transformed_data_.Reshape(shape);
  shape[0] = batch_size;
  top[0]->Reshape(shape);
  for (size_t i = 0; i < this->prefetch_.size(); ++i) {
    this->prefetch_[i]->data_.Reshape(shape);
  }
  if (this->output_labels_) {
    const std::vector<int> label_shape(1, batch_size);
    top[1]->Reshape(label_shape);
    for (size_t i = 0; i < this->prefetch_.size(); ++i) {
      this->prefetch_[i]->label_.Reshape(label_shape);
    }
  }

  pool_.reset(new WorkerPool(default_workers()));
  for (size_t w = 0; w < pool_->size(); ++w) {
    transformers_.emplace_back(
        new caffe::DataTransformer<Dtype>(this->transform_param_, this->phase_));
    transformers_.back()->InitRand();
    item_views_.emplace_back(new caffe::Blob<Dtype>());
  }
  LOG(INFO) << "LMDBIOData " << this->layer_param_.name() << ": " << source_ << ", " << records
            << " records, rank " << rank << " of " << ranks << ", "
            << (engine_ != nullptr ? "lmdbio engine" : "per-rank reader (another layer has the engine)")
            << ", " << pool_->size()
            << " worker thread(s); output data size: " << top[0]->num() << ","
            << top[0]->channels() << "," << top[0]->height() << "," << top[0]->width();
}

template <typename Dtype>
void LmdbioDataLayer<Dtype>::open_engine(int batch_size, int* rank, int* ranks, uint64_t* records) {
  lmdbio_options* options = nullptr;
  CHECK_EQ(lmdbio_options_new(&options), LMDBIO_OK) << lmdbio_last_error();
  CHECK_EQ(lmdbio_options_set_batch_size(options, batch_size), LMDBIO_OK) << lmdbio_last_error();
  // Data-parallel: the ranks' batches together are one process's batch of
  // P times the size (cpp/data_parallel.cpp).
  if (data_parallel_enabled()) {
    CHECK_EQ(lmdbio_options_set_partition(options, LMDBIO_PARTITION_STRIDED), LMDBIO_OK)
        << lmdbio_last_error();
  }
  const size_t shuffle_seed = env_count("LMDBIO_CAFFE_SHUFFLE_SEED");
  if (shuffle_seed > 0) {
    CHECK_EQ(lmdbio_options_set_shuffle(options, shuffle_seed, 0), LMDBIO_OK)
        << "LMDBIO_CAFFE_SHUFFLE_SEED: " << lmdbio_last_error();
  }
  const char* shuffle_mode = std::getenv("LMDBIO_CAFFE_SHUFFLE_MODE");
  if (shuffle_mode != nullptr && *shuffle_mode != '\0') {
    const std::string name(shuffle_mode);
    const int mode = name == "global"               ? LMDBIO_SHUFFLE_GLOBAL
                     : name == "chunked"            ? LMDBIO_SHUFFLE_CHUNKED
                     : name == "global-after-first" ? LMDBIO_SHUFFLE_GLOBAL_AFTER_FIRST
                                                    : -1;
    CHECK_NE(mode, -1) << "LMDBIO_CAFFE_SHUFFLE_MODE must be chunked, global or global-after-first, got \""
                       << name << "\"";
    CHECK_GT(shuffle_seed, 0u) << "LMDBIO_CAFFE_SHUFFLE_MODE needs LMDBIO_CAFFE_SHUFFLE_SEED";
    CHECK_EQ(lmdbio_options_set_shuffle_mode(options, mode), LMDBIO_OK) << lmdbio_last_error();
  }
  const size_t ranks_per_node = env_count("LMDBIO_CAFFE_RANKS_PER_NODE");
  if (ranks_per_node > 0) {
    CHECK_EQ(lmdbio_options_set_ranks_per_node(options, ranks_per_node), LMDBIO_OK)
        << "LMDBIO_CAFFE_RANKS_PER_NODE: " << lmdbio_last_error();
  }
  if (env_count("LMDBIO_CAFFE_COLLECTIVE") > 0) {
    CHECK_EQ(lmdbio_options_set_collective(options, 1), LMDBIO_OK) << lmdbio_last_error();
  }
  const char* direct_io = std::getenv("LMDBIO_CAFFE_DIRECT_IO");
  if (direct_io != nullptr && *direct_io != '\0') {
    const std::string when(direct_io);
    const int mode = when == "auto"     ? LMDBIO_DIRECT_IO_AUTO
                     : when == "always" ? LMDBIO_DIRECT_IO_ALWAYS
                     : when == "never"  ? LMDBIO_DIRECT_IO_NEVER
                                        : -1;
    CHECK_NE(mode, -1) << "LMDBIO_CAFFE_DIRECT_IO must be auto, always or never, got \"" << when << "\"";
    CHECK_EQ(lmdbio_options_set_direct_io(options, mode), LMDBIO_OK) << lmdbio_last_error();
  }
  const char* inline_pages = std::getenv("LMDBIO_CAFFE_INLINE_PAGES");
  if (inline_pages != nullptr && *inline_pages != '\0') {
    char* end = nullptr;
    const unsigned long long bytes = std::strtoull(inline_pages, &end, 10);
    CHECK(*end == '\0') << "LMDBIO_CAFFE_INLINE_PAGES must be a byte count, got \"" << inline_pages << "\"";
    CHECK_EQ(lmdbio_options_set_inline_pages(options, bytes), LMDBIO_OK) << lmdbio_last_error();
  }
  const char* stage = std::getenv("LMDBIO_CAFFE_STAGE");
  if (stage != nullptr && *stage != '\0') {
    unsigned long long budget = ~0ULL;
    const char* budget_text = std::getenv("LMDBIO_CAFFE_STAGE_BUDGET");
    if (budget_text != nullptr && *budget_text != '\0') {
      char* end = nullptr;
      budget = std::strtoull(budget_text, &end, 10);
      CHECK(*end == '\0') << "LMDBIO_CAFFE_STAGE_BUDGET must be a byte count, got \"" << budget_text
                          << "\"";
    }
    const int keep = env_count("LMDBIO_CAFFE_KEEP_STAGE") > 0 ? 1 : 0;
    CHECK_EQ(lmdbio_options_set_stage(options, stage, budget, keep), LMDBIO_OK) << lmdbio_last_error();
  }
  // Collective: every rank constructs its nets' layers in the same order.
  const int rc = lmdbio_open(MPI_COMM_WORLD, source_.c_str(), options, &engine_);
  lmdbio_options_free(options);
  if (rc != LMDBIO_OK) {
    LOG(FATAL) << "LMDBIOData " << this->layer_param_.name() << ": cannot read LMDB " << source_
               << ": " << lmdbio_last_error();
  }
  CHECK_EQ(lmdbio_rank_info(engine_, rank, ranks, nullptr, nullptr), LMDBIO_OK);
  CHECK_EQ(lmdbio_record_count(engine_, records), LMDBIO_OK);
}

template <typename Dtype>
void LmdbioDataLayer<Dtype>::open_share_reader(int* rank, int* ranks, uint64_t* records) {
  world_rank_size(rank, ranks);
  const int strided = data_parallel_enabled() ? 1 : 0;
  if (lmdbio_caffe_reader_open(source_.c_str(), *rank, *ranks, strided, &reader_) != 0) {
    LOG(FATAL) << "LMDBIOData " << this->layer_param_.name() << ": cannot read LMDB " << source_
               << ": " << lmdbio_caffe_last_error();
  }
  CHECK_EQ(lmdbio_caffe_reader_share(reader_, records, nullptr, nullptr, nullptr), 0);
}

// Caffe's loop checks must_stop() between batches, so a layer stops after
// however many batches it happened to load when interrupted: a number that
// differs between ranks and would leave a collective step unmatched. This
// loop loads one batch for every batch the free queue ever held: the
// prefetch count, plus one per batch the net gave back, all given back
// before the layer is stopped. The interruption is seen only in a wait for
// an empty free queue, but a wait woken by a batch given back just before
// the stop can also end in the interruption (boost checks for it on
// waking); so after it, every batch still in the queue is loaded too. The
// engine steps are then the same on every rank, whenever each one's
// prefetch thread happens to run.
template <typename Dtype>
void LmdbioDataLayer<Dtype>::InternalThreadEntry() {
  try {
    for (;;) {
      caffe::Batch<Dtype>* batch = this->prefetch_free_.pop();
      load_batch(batch);
      this->prefetch_full_.push(batch);
    }
  } catch (boost::thread_interrupted&) {
    // Expected at shutdown: load what is left, without waiting.
    caffe::Batch<Dtype>* batch = nullptr;
    while (this->prefetch_free_.try_pop(&batch)) {
      load_batch(batch);
      this->prefetch_full_.push(batch);
    }
  }
}

template <typename Dtype>
void LmdbioDataLayer<Dtype>::next_batch(lmdbio_batch* out) {
  if (engine_ == nullptr) {
    next_reader_batch(out);
    return;
  }
  if (lmdbio_next_batch(engine_, out) != LMDBIO_OK) {
    LOG(FATAL) << "LMDBIOData " << this->layer_param_.name() << ": reading " << source_ << ": "
               << lmdbio_last_error();
  }
  CHECK_GT(out->count, 0u) << "LMDBIOData: " << source_ << " gave an empty batch";
}

// The share in key order, wrapping at its end as the engine does.
template <typename Dtype>
void LmdbioDataLayer<Dtype>::next_reader_batch(lmdbio_batch* out) {
  const size_t batch_size = this->layer_param_.data_param().batch_size();
  reader_keys_.resize(batch_size);
  reader_values_.resize(batch_size);
  reader_records_.resize(batch_size);
  for (size_t i = 0; i < batch_size; ++i) {
    if (!lmdbio_caffe_reader_valid(reader_)) lmdbio_caffe_reader_seek_to_first(reader_);
    const void* key = nullptr;
    const void* value = nullptr;
    size_t key_len = 0, value_len = 0;
    uint64_t ordinal = 0;
    if (lmdbio_caffe_reader_key(reader_, &key, &key_len) != 0 ||
        lmdbio_caffe_reader_ordinal(reader_, &ordinal) != 0 ||
        lmdbio_caffe_reader_value(reader_, &value, &value_len) != 0) {
      LOG(FATAL) << "LMDBIOData " << this->layer_param_.name() << ": reading " << source_ << ": "
                 << lmdbio_caffe_last_error();
    }
    // Copies: the reader's buffer moves on with the next chunk.
    reader_keys_[i].assign(static_cast<const char*>(key), key_len);
    reader_values_[i].assign(static_cast<const char*>(value), value_len);
    lmdbio_caffe_reader_next(reader_);
    lmdbio_record& record = reader_records_[i];
    record.key = reader_keys_[i].data();
    record.key_len = key_len;
    record.value = reader_values_[i].data();
    record.value_len = value_len;
    record.ordinal = ordinal;
    record.epoch = 0;
  }
  out->records = reader_records_.data();
  out->count = batch_size;
  out->step = 0;
  out->epoch = 0;
}

template <typename Dtype>
void LmdbioDataLayer<Dtype>::parse_datum(const lmdbio_record& record, caffe::Datum* datum) const {
  if (record.value_len > static_cast<size_t>(INT32_MAX) ||
      !datum->ParseFromArray(record.value, static_cast<int>(record.value_len))) {
    LOG(FATAL) << "LMDBIOData: " << source_ << ": record " << record.ordinal << " (key \""
               << printable_key(record) << "\", " << record.value_len
               << " bytes) is not a caffe.Datum";
  }
}

template <typename Dtype>
void LmdbioDataLayer<Dtype>::load_batch(caffe::Batch<Dtype>* batch) {
  lmdbio_batch records;
  if (has_pending_) {
    records = pending_;
    has_pending_ = false;
  } else {
    next_batch(&records);
  }
  const int batch_size = this->layer_param_.data_param().batch_size();
  CHECK_EQ(records.count, static_cast<size_t>(batch_size)) << "LMDBIOData: short batch";
  if (key_log_enabled()) {
    for (size_t i = 0; i < records.count; ++i) {
      log_key(records.records[i].key, records.records[i].key_len);
    }
  }

  // As the stock layer does, shape the batch from its first record.
  caffe::Datum first;
  parse_datum(records.records[0], &first);
  std::vector<int> item_shape = this->data_transformer_->InferBlobShape(first);
  std::vector<int> batch_shape = item_shape;
  batch_shape[0] = batch_size;
  batch->data_.Reshape(batch_shape);
  Dtype* data = batch->data_.mutable_cpu_data();
  Dtype* labels = this->output_labels_ ? batch->label_.mutable_cpu_data() : nullptr;
  const int item_count = batch->data_.count() / batch_size;

  pool_->run(records.count, [&](size_t item, size_t worker) {
    caffe::Datum datum;
    parse_datum(records.records[item], &datum);
    caffe::Blob<Dtype>* view = item_views_[worker].get();
    view->Reshape(item_shape);
    view->set_cpu_data(data + item * item_count);
    transformers_[worker]->Transform(datum, view);
    if (labels != nullptr) labels[item] = datum.label();
  });
}

template class LmdbioDataLayer<float>;
template class LmdbioDataLayer<double>;

namespace {

template <typename Dtype>
boost::shared_ptr<caffe::Layer<Dtype> > create_layer(const caffe::LayerParameter& param) {
  return boost::shared_ptr<caffe::Layer<Dtype> >(new LmdbioDataLayer<Dtype>(param));
}

template <typename Dtype>
using AddCreator = void (*)(const std::string&,
                            boost::shared_ptr<caffe::Layer<Dtype> > (*)(const caffe::LayerParameter&));

// LayerRegistry's table is a function-local static of an inline template;
// this library's own copy of it is private (Rust's cdylib exports only its
// own symbols), so register through libcaffe's exported AddCreator.
template <typename Dtype>
void register_with_libcaffe(const char* mangled) {
  void* f = dlsym(RTLD_DEFAULT, mangled);
  if (f == nullptr) {
    std::fprintf(stderr, "libcaffe_lmdbio: cannot register LMDBIOData: %s not found (%s)\n",
                 mangled, dlerror());
    return;
  }
  reinterpret_cast<AddCreator<Dtype> >(f)("LMDBIOData", &create_layer<Dtype>);
}

struct Registration {
  Registration() {
    register_with_libcaffe<float>(
        "_ZN5caffe13LayerRegistryIfE10AddCreatorERKNSt7__cxx1112basic_stringIcSt11char_"
        "traitsIcESaIcEEEPFN5boost10shared_ptrINS_5LayerIfEEEERKNS_14LayerParameterEE");
    register_with_libcaffe<double>(
        "_ZN5caffe13LayerRegistryIdE10AddCreatorERKNSt7__cxx1112basic_stringIcSt11char_"
        "traitsIcESaIcEEEPFN5boost10shared_ptrINS_5LayerIdEEEERKNS_14LayerParameterEE");
  }
};

const Registration registration;

}  // namespace
}  // namespace lmdbio_caffe
