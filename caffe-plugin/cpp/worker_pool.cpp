#include "worker_pool.hpp"

#include <sched.h>

#include <cstdlib>
#include <string>

#include <glog/logging.h>

namespace lmdbio_caffe {

WorkerPool::WorkerPool(std::size_t workers) {
  CHECK_GE(workers, 1u);
  for (std::size_t w = 1; w < workers; w++) {
    threads_.emplace_back([this, w] { thread_main(w); });
  }
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  start_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void WorkerPool::run(std::size_t items,
                     const std::function<void(std::size_t, std::size_t)>& task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = &task;
    items_ = items;
    next_item_.store(0);
    busy_ = threads_.size();
    generation_++;
  }
  start_.notify_all();
  drain(0);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return busy_ == 0; });
  task_ = nullptr;
}

void WorkerPool::drain(std::size_t worker) {
  for (;;) {
    const std::size_t item = next_item_.fetch_add(1);
    if (item >= items_) return;
    (*task_)(item, worker);
  }
}

void WorkerPool::thread_main(std::size_t worker) {
  std::uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    drain(worker);
    std::lock_guard<std::mutex> lock(mutex_);
    if (--busy_ == 0) done_.notify_all();
  }
}

std::size_t default_workers() {
  const char* env = std::getenv("LMDBIO_CAFFE_THREADS");
  if (env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    CHECK(*end == '\0' && n >= 1 && n <= 1024)
        << "LMDBIO_CAFFE_THREADS must be a number of threads (1..1024), got \"" << env << "\"";
    return static_cast<std::size_t>(n);
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) {
    return static_cast<std::size_t>(CPU_COUNT(&set));
  }
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? n : 1;
}

}  // namespace lmdbio_caffe
