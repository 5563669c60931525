#pragma once
// The pool's record of stream progress, in one place for every layer that caches memory.
//
// Every free is stamped with a sequence number and the stream it was freed on. Memory freed on
// stream S at sequence q is safe for another stream once an event recorded on S after q has
// completed. Events are recorded lazily and in batches — one event covers every free on S before
// it — and only when some other stream wants memory S holds: a free costs no driver call.
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "gpumem/core.hpp"
#include "gpumem/upstream.hpp"

namespace gpumem::detail {

// A (stream, sequence) condition: met once the stream's completed sequence reaches `seq`.
struct stream_mark {
  stream_ref stream;
  std::uint64_t seq;
};

class stream_clock {
 public:
  explicit stream_clock(ordering& ord) : ord_(ord) {}
  ~stream_clock();
  stream_clock(const stream_clock&) = delete;
  stream_clock& operator=(const stream_clock&) = delete;

  // Stamps a free on `s`; the returned mark is met when `s` has run past this point.
  stream_mark note_free(stream_ref s);
  bool met(const stream_mark& m) const {
    auto it = streams_.find(m.stream);
    // A stream no longer tracked was forgotten after a full wait: its marks are met.
    return it == streams_.end() || it->second.completed >= m.seq;
  }
  std::uint64_t completed(stream_ref s) const {
    auto it = streams_.find(s);
    return it == streams_.end() ? UINT64_MAX : it->second.completed;
  }
  // Records an event on every stream with frees no event covers yet (all but `except`, if given).
  void cover_all();
  // Queries pending events; true if any stream's completed mark moved.
  bool poll();
  // Host-waits for every pending event; true if any mark moved.
  bool wait_all();
  // Host-waits for everything noted on `s`, then drops `s`: no event is recorded on it again, and
  // every mark on it counts as met.
  void forget(stream_ref s);
  // While `s` captures a CUDA graph an event recorded there would join the graph: cover_all skips
  // it, and forget refuses it.
  void set_capturing(stream_ref s, bool on);
  std::uint64_t events_recorded() const noexcept { return events_recorded_; }
  bool has_pending() const noexcept { return pending_count_ > 0; }

 private:
  struct pending_event { event_ref event; std::uint64_t seq; };
  struct per_stream {
    std::uint64_t newest = 0;     // sequence of the newest free on this stream
    std::uint64_t covered = 0;    // newest free an event has been recorded after
    std::uint64_t completed = 0;  // newest free known to be done
    std::deque<pending_event> pending;
  };
  ordering& ord_;
  std::unordered_map<stream_ref, per_stream> streams_;
  std::uint64_t seq_ = 0;
  std::uint64_t events_recorded_ = 0;
  std::size_t pending_count_ = 0;
  std::vector<stream_ref> capturing_;  // few: a linear search
};

}  // namespace gpumem::detail
