// thread_pool.cpp: fixed worker threads woken per parallel_for by a generation counter.
#include "runtime/cpu/thread_pool.h"

#include <algorithm>

#include "runtime/cpu_budget.h"

namespace tpshard {

namespace {
/// Range [begin, end) of part `index` when n items are split into `parts` nearly equal parts.
void split_range(int64_t n, int parts, int index, int64_t* begin, int64_t* end) {
  const int64_t base = n / parts, extra = n % parts;
  *begin = index * base + std::min<int64_t>(index, extra);
  *end = *begin + base + (index < extra ? 1 : 0);
}
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  const int workers = std::max(1, num_threads) - 1;
  for (int i = 0; i < workers; ++i) workers_.emplace_back([this, i] { worker_loop(i + 1); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::default_threads_per_rank(int tp_size) {
  return threads_per_rank(tp_size);  // affinity mask and cgroup quota, not the machine; OMP_NUM_THREADS
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job;
    int64_t n;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_work_.wait(lock, [&] { return stop_ || job_generation_ != seen; });
      if (stop_) return;
      seen = job_generation_;
      job = job_;
      n = job_n_;
    }
    int64_t b, e;
    split_range(n, num_threads(), index, &b, &e);
    try {
      if (b < e) (*job)(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) cv_done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    pending_ = static_cast<int>(workers_.size());
    error_ = nullptr;
    ++job_generation_;
  }
  cv_work_.notify_all();
  int64_t b, e;
  split_range(n, num_threads(), 0, &b, &e);
  std::exception_ptr mine;
  try {
    if (b < e) fn(b, e);
  } catch (...) {
    mine = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  cv_done_.wait(lock, [&] { return pending_ == 0; });
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(error_);
}

}  // namespace tpshard
