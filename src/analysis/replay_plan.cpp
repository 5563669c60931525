// Builds a replay_plan (replay_plan.hpp): the one pass over a trace that hashes its pointers and
// Stream values, so no timed loop has to.
#include "gpumem/detail/replay_plan.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <unordered_map>

namespace gpumem {

replay_plan make_replay_plan(const trace& t) {
  if (t.records.size() > std::numeric_limits<std::uint32_t>::max())
    throw std::length_error(t.name + ": too many rows for a replay plan (2^32 or more)");
  replay_plan plan;
  plan.rows = t.records.size();
  struct open_block {
    std::uint32_t slot;
    std::uint64_t size;
  };
  std::unordered_map<std::uint64_t, open_block> open;  // by the trace's pointer
  std::vector<std::uint32_t> free_slots;               // reused last-freed first
  std::unordered_map<std::uint64_t, std::uint32_t> stream_index{{0, 0}};
  auto dense_stream = [&](std::uint64_t s) {
    const auto [it, fresh] = stream_index.try_emplace(s, static_cast<std::uint32_t>(plan.streams.size()));
    if (fresh) plan.streams.push_back(s);
    return it->second;
  };
  std::size_t live_bytes = 0;
  for (std::size_t i = 0; i < t.records.size(); ++i) {
    const trace_record& rec = t.records[i];
    const auto row = static_cast<std::uint32_t>(i);
    switch (rec.action) {
      case trace_action::allocate: {
        std::uint32_t slot;
        if (!free_slots.empty()) {
          slot = free_slots.back();
          free_slots.pop_back();
        } else {
          slot = plan.slots++;
        }
        open[rec.pointer] = {slot, rec.size};
        plan.ops.push_back({rec.size, slot, dense_stream(rec.stream), row, true});
        live_bytes += rec.size;
        plan.peak_live_bytes = std::max(plan.peak_live_bytes, live_bytes);
        break;
      }
      case trace_action::free: {
        const auto it = open.find(rec.pointer);
        if (it == open.end()) break;
        plan.ops.push_back({it->second.size, it->second.slot, dense_stream(rec.stream), row, false});
        live_bytes -= it->second.size;
        free_slots.push_back(it->second.slot);
        open.erase(it);
        break;
      }
      case trace_action::allocate_failure: ++plan.trace_failures; break;
    }
  }
  return plan;
}

}  // namespace gpumem
