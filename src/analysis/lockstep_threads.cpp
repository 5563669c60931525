#include "lockstep_threads.hpp"

#include <algorithm>

namespace gpumem::detail {

lockstep_threads::lockstep_threads(std::vector<std::uint32_t> worker_of) : worker_of_(std::move(worker_of)) {
  const std::uint32_t workers = worker_of_.empty() ? 0 : *std::max_element(worker_of_.begin(), worker_of_.end()) + 1;
  threads_.reserve(workers);
  for (std::uint32_t w = 0; w < workers; ++w) threads_.emplace_back([this, w] { work(w); });
}

lockstep_threads::~lockstep_threads() {
  {
    std::lock_guard lock(m_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void lockstep_threads::run(const std::function<void(std::size_t)>& step) {
  if (worker_of_.empty()) return;
  std::unique_lock lock(m_);
  step_ = &step;
  next_ = 0;
  failure_ = nullptr;
  running_ = true;
  cv_.notify_all();
  cv_.wait(lock, [&] { return !running_; });
  step_ = nullptr;
  if (failure_) std::rethrow_exception(failure_);
}

void lockstep_threads::work(std::uint32_t me) {
  std::unique_lock lock(m_);
  for (;;) {
    // A step of mine is due, or the run is over (or the runner goes).
    cv_.wait(lock, [&] { return stopping_ || (running_ && worker_of_[next_] == me); });
    if (stopping_) return;
    try {
      (*step_)(next_);
    } catch (...) {
      failure_ = std::current_exception();
      running_ = false;
    }
    if (running_ && ++next_ == worker_of_.size()) running_ = false;
    cv_.notify_all();
  }
}

}  // namespace gpumem::detail
