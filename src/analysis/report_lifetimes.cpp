// lifetimes_at_peak (include/gpumem/report.hpp): a second replay up to the peak that remembers
// which trace row each block came from, paired with the result's segment map only when both
// replays reached the very same block map.
#include <algorithm>
#include <unordered_map>

#include "gpumem/pool.hpp"
#include "gpumem/report.hpp"
#include "gpumem/sim_device.hpp"

namespace gpumem {

std::vector<block_lifetime> lifetimes_at_peak(const trace& t, const replay_result& result, const replay_options& opts) {
  if ((opts.resource != "pool" && opts.resource != "pool-segments") || result.segment_map_at_peak.empty()) return {};
  const std::uint64_t end = std::min<std::uint64_t>(result.peak_op + 1, t.records.size());
  struct open_alloc {
    void* addr = nullptr;
    std::uint64_t bytes = 0;
    std::uint64_t row = 0;
    stream_ref stream = {};
  };
  std::unordered_map<std::uint64_t, open_alloc> open;
  std::vector<block_info> blocks;
  {
    sim_device dev(sim_options{.capacity_bytes = opts.capacity_bytes,
                               .granularity_bytes = default_granularity,
                               .virtual_memory = opts.resource == "pool",
                               .auto_complete = true});
    pool p(dev.memory(), dev.streams(), opts.pool);
    for (std::uint64_t i = 0; i < end; ++i) {
      const trace_record& rec = t.records[i];
      if (rec.action == trace_action::allocate) {
        void* a = nullptr;
        try {
          a = p.allocate(rec.size, default_alignment, stream_ref{rec.stream});
        } catch (const out_of_memory&) {
          a = nullptr;
        }
        open[rec.pointer] = {a, rec.size, i, stream_ref{rec.stream}};
      } else if (rec.action == trace_action::free) {
        auto it = open.find(rec.pointer);
        if (it == open.end()) continue;
        if (it->second.addr) p.deallocate(it->second.addr, it->second.bytes, default_alignment, stream_ref{rec.stream});
        open.erase(it);
      }
    }
    blocks = p.blocks();
    for (auto& [ptr, a] : open)
      if (a.addr) p.deallocate(a.addr, a.bytes, default_alignment, stream_ref{});
  }
  // The pairing holds only if this replay reached the very same block map.
  const auto& ref = result.segment_map_at_peak;
  if (blocks.size() != ref.size()) return {};
  for (std::size_t i = 0; i < blocks.size(); ++i)
    if (blocks[i].address != ref[i].address || blocks[i].bytes != ref[i].bytes || blocks[i].st != ref[i].st ||
        blocks[i].segment != ref[i].segment)
      return {};
  // Free rows after the peak, by the trace's own pointers.
  std::unordered_map<std::uint64_t, std::uint64_t> free_row;
  for (std::uint64_t i = end; i < t.records.size(); ++i) {
    const trace_record& rec = t.records[i];
    if (rec.action == trace_action::free && open.count(rec.pointer) && !free_row.count(rec.pointer)) free_row[rec.pointer] = i;
    if (rec.action == trace_action::allocate && open.count(rec.pointer) && !free_row.count(rec.pointer))
      free_row[rec.pointer] = block_lifetime::never;  // reused without a free: read_trace forbids it
  }
  // Only requests served whole from the arena match a block; small ones live inside slabs.
  const std::uint64_t small = std::min(opts.pool.small_max_bytes, std::size_t{1} << 20);
  std::unordered_map<std::uintptr_t, std::size_t> block_at;
  for (std::size_t i = 0; i < blocks.size(); ++i)
    if (blocks[i].st == block_info::state::live) block_at[blocks[i].address] = i;
  std::vector<block_lifetime> out;
  for (const auto& [ptr, a] : open) {
    if (!a.addr || a.bytes <= small) continue;
    auto it = block_at.find(reinterpret_cast<std::uintptr_t>(a.addr));
    if (it == block_at.end() || blocks[it->second].bytes < a.bytes) continue;
    auto f = free_row.find(ptr);
    out.push_back({reinterpret_cast<std::uintptr_t>(a.addr), a.row, f == free_row.end() ? block_lifetime::never : f->second, a.bytes});
  }
  std::sort(out.begin(), out.end(), [](const block_lifetime& x, const block_lifetime& y) { return x.address < y.address; });
  return out;
}

}  // namespace gpumem
