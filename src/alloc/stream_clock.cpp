#include "stream_clock.hpp"

#include <algorithm>
#include <stdexcept>

namespace gpumem::detail {

stream_clock::~stream_clock() {
  for (auto& [s, st] : streams_)
    for (auto& p : st.pending) ord_.release(p.event);
}

stream_mark stream_clock::note_free(stream_ref s) {
  auto& st = streams_[s];
  st.newest = ++seq_;
  return {s, seq_};
}

void stream_clock::cover_all() {
  for (auto& [s, st] : streams_) {
    if (st.newest > st.covered && st.newest > st.completed) {
      if (!capturing_.empty() && std::find(capturing_.begin(), capturing_.end(), s) != capturing_.end()) continue;
      event_ref e = ord_.record(s);
      ++events_recorded_;
      st.pending.push_back({e, st.newest});
      st.covered = st.newest;
      ++pending_count_;
    }
  }
}

bool stream_clock::poll() {
  if (pending_count_ == 0) return false;
  bool moved = false;
  for (auto& [s, st] : streams_) {
    // Events on one stream complete in order: stop at the first that has not.
    while (!st.pending.empty() && ord_.query(st.pending.front().event)) {
      st.completed = st.pending.front().seq;
      ord_.release(st.pending.front().event);
      st.pending.pop_front();
      --pending_count_;
      moved = true;
    }
  }
  return moved;
}

void stream_clock::set_capturing(stream_ref s, bool on) {
  if (on)
    capturing_.push_back(s);
  else
    std::erase(capturing_, s);
}

void stream_clock::forget(stream_ref s) {
  if (std::find(capturing_.begin(), capturing_.end(), s) != capturing_.end())
    throw std::logic_error("gpumem::pool::release_stream: the stream captures a CUDA graph; end_capture first");
  auto it = streams_.find(s);
  if (it == streams_.end()) return;
  per_stream& st = it->second;
  if (st.newest > st.covered && st.newest > st.completed) {
    // Frees no event covers yet: one last event, waited for at once.
    const event_ref e = ord_.record(s);
    ++events_recorded_;
    ord_.synchronize(e);
    ord_.release(e);
  } else if (!st.pending.empty()) {
    ord_.synchronize(st.pending.back().event);
  }
  for (auto& p : st.pending) ord_.release(p.event);
  pending_count_ -= st.pending.size();
  streams_.erase(it);
}

bool stream_clock::wait_all() {
  if (pending_count_ == 0) return false;
  for (auto& [s, st] : streams_) {
    if (st.pending.empty()) continue;
    ord_.synchronize(st.pending.back().event);  // the newest covers the older ones
    st.completed = st.pending.back().seq;
    for (auto& p : st.pending) ord_.release(p.event);
    pending_count_ -= st.pending.size();
    st.pending.clear();
  }
  return true;
}

}  // namespace gpumem::detail
