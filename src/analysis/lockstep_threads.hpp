#pragma once
// Runs a sequence of steps one at a time, in order, each on the worker thread it is assigned to:
// the replay's way to issue every request of a trace on the thread that made it (replay_options::
// recorded_threads). A pool keeps a front cache per thread, so which thread allocates and which
// frees decides what gets cached; a job whose requests come from several threads (PyTorch's
// autograd runs the backward pass on a thread of its own) behaves differently replayed on one.
// Only one step runs at any time and each hands over to the next under one mutex, so the steps
// need no locking of their own and see each other's effects; the time is the handovers', not the
// allocator's.
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gpumem::detail {

class lockstep_threads {
 public:
  // `worker_of[i]`: the worker that runs step i; workers 0 .. the largest named are started.
  explicit lockstep_threads(std::vector<std::uint32_t> worker_of);
  ~lockstep_threads();
  lockstep_threads(const lockstep_threads&) = delete;
  lockstep_threads& operator=(const lockstep_threads&) = delete;

  // Runs step(0) .. step(n-1) on their workers, in order; returns when all are done. The first
  // exception a step throws stops the run and is rethrown here. May be called again (a pass).
  void run(const std::function<void(std::size_t)>& step);

 private:
  void work(std::uint32_t me);

  std::vector<std::uint32_t> worker_of_;
  std::mutex m_;
  std::condition_variable cv_;
  const std::function<void(std::size_t)>* step_ = nullptr;
  std::size_t next_ = 0;  // the step to run now
  bool running_ = false, stopping_ = false;
  std::exception_ptr failure_;
  std::vector<std::thread> threads_;
};

}  // namespace gpumem::detail
