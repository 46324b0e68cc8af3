// thread_pool.h: a small fixed pool of worker threads for the CPU backend's big loops (matrix products,
// attention). Each tp rank owns one pool; keep tp_size * pool threads <= usable_cpus().
// Owns: parallel_for only (no task queue, no futures).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tpshard {

class ThreadPool {
 public:
  /// num_threads >= 1 counts the calling thread: num_threads - 1 workers are started.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  /// Call fn(begin, end) on disjoint ranges covering [0, n), at most num_threads() ranges of
  /// (nearly) equal size, one per thread; the caller runs one of them. Returns when all are done.
  /// The split depends only on n and num_threads(), so results are deterministic. An exception in fn
  /// is rethrown here (the first one).
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

  /// Threads per rank for tp_size ranks in one process: threads_per_rank(tp_size) (runtime/cpu_budget.h:
  /// OMP_NUM_THREADS, else max(1, usable_cpus() / tp_size)).
  static int default_threads_per_rank(int tp_size);

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable cv_work_;
  std::condition_variable cv_done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  uint64_t job_generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace tpshard
