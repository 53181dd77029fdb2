// A fixed pool of threads that runs one indexed task at a time: the
// LMDBIOData layer decodes and transforms a batch's records in parallel.
// The calling thread works too, so a pool of size 1 starts no thread.
#ifndef LMDBIO_CAFFE_WORKER_POOL_HPP
#define LMDBIO_CAFFE_WORKER_POOL_HPP

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lmdbio_caffe {

class WorkerPool {
 public:
  // `workers` >= 1 counts the calling thread.
  explicit WorkerPool(std::size_t workers);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  std::size_t size() const { return threads_.size() + 1; }

  // Runs task(item, worker) for every item in [0, items), worker in
  // [0, size()); returns when all are done. One run at a time.
  void run(std::size_t items, const std::function<void(std::size_t, std::size_t)>& task);

 private:
  void thread_main(std::size_t worker);
  void drain(std::size_t worker);

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  const std::function<void(std::size_t, std::size_t)>* task_ = nullptr;
  std::size_t items_ = 0;
  std::atomic<std::size_t> next_item_{0};
  std::uint64_t generation_ = 0;
  std::size_t busy_ = 0;
  bool stopping_ = false;
};

// Workers for a rank: LMDBIO_CAFFE_THREADS if set, else the CPUs this
// process may run on (its affinity mask, which mpiexec may have narrowed).
std::size_t default_workers();

}  // namespace lmdbio_caffe

#endif
