// libFuzzer target: byte-coded operations on a pool over the simulated device, checked by the
// shadow model after every step (no overlap, alignment, mapping, no cross-stream reuse before the
// pool knows the freeing stream's event completed, accounting) and check_invariants every 64 ops.
//
// Encoding, one op per 4 bytes: [op][a][b][c]
//   op % 8: 0-2 allocate (size from a,b log-scaled up to 64 MiB; alignment 2^(c%22) or 256;
//           stream c>>6), 3-4 free (live[a % n] on stream b%4), 5 record_use, 6 complete(stream a%4),
//   7 trim (a % 4 == 0) or toggle fail_every (a % 4 == 1).
// The first byte picks the configuration: virtual or segments, slabs or none, release threshold 0,
// capacity, idle budget with a remap time budget, grow first, 8 MiB physical handles, large front
// caches with the caller's own blocks first. Stream-ordered moves are on (the default) in every
// virtual configuration: the model checks every place a handle is mapped at.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "support/pool_model.hpp"

using namespace gpumem;

namespace {
// The remap time budget's clock: 500 ns per op, so an input replays the same every time.
std::atomic<std::uint64_t> op_clock_ns{0};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t cfg = data[0];
  detail::pool_config po;
  if (cfg & 2) po.small_max_bytes = 0;
  if (cfg & 4) po.release_threshold_bytes = 0;
  if (cfg & 16) {
    po.idle_budget = 0.5;  // keeps idle granules mapped; gives way when the device is full
    // and moves bounded to 2 % of the time, 36 µs charged per granule: growth instead, and moves
    // when the device is full
    po.remap_time_budget = 0.02;
    po.remap_cost_ns_per_granule = 36e3;
    po.remap_clock_ns = [] { return op_clock_ns.load(); };
  }
  op_clock_ns = 0;
  if (cfg & 32) po.grow_before_reclaim = true;  // (with 32 MiB handles, by policy)
  if (cfg & 64) po.max_handle_bytes = std::size_t{8} << 20;  // handles of 4 granules, moved whole
  if (cfg & 128) {  // large front caches, and the caller's own blocks before remapping
    po.front_cache_peak_fraction = 1.0;
    po.reclaim_own_first = true;
  }
  const std::size_t capacity = (cfg & 8) ? (std::size_t{16} << 20) : (std::size_t{256} << 20);
  test::sim_pool_rig r(sim_options{.capacity_bytes = capacity, .virtual_memory = (cfg & 1) != 0}, po);
  stream_ref streams[4];
  for (auto& s : streams) s = r.dev->create_stream();
  struct held { void* p; stream_ref s; };
  std::vector<held> live;
  std::size_t step = 0;
  for (std::size_t i = 1; i + 4 <= size; i += 4, ++step) {
    op_clock_ns = step * 500;
    const std::uint8_t op = data[i] % 8, a = data[i + 1], b = data[i + 2], c = data[i + 3];
    switch (op) {
      case 0: case 1: case 2: {
        const unsigned shift = (a % 27);  // up to 64 MiB
        const std::size_t bytes = (std::size_t{1} << shift) + (std::size_t{b} << (shift > 8 ? shift - 8 : 0));
        const std::size_t align = (c & 0x20) ? (std::size_t{1} << (c % 22)) : default_alignment;
        const stream_ref s = streams[c >> 6];
        try {
          live.push_back({r.allocate(bytes, align, s), s});
        } catch (const out_of_memory&) {
        }
        break;
      }
      case 3: case 4:
        if (!live.empty()) {
          const std::size_t k = a % live.size();
          r.deallocate(live[k].p, (c & 1) ? streams[b % 4] : live[k].s);
          live[k] = live.back();
          live.pop_back();
        }
        break;
      case 5:
        if (!live.empty()) {
          const auto& h = live[a % live.size()];
          r.p->record_use(h.p, streams[b % 4]);
          r.model->on_record_use(h.p, streams[b % 4]);
        }
        break;
      case 6: r.dev->complete(streams[a % 4]); break;
      case 7:
        if (a % 4 == 0) r.p->trim();
        else if (a % 4 == 1) r.dev->fail_every((b & 1) != 0);
        break;
    }
    r.model->check_stats();  // throws model_error: libFuzzer reports it as a crash
    if (step % 64 == 63) r.model->check_full();
  }
  r.dev->fail_every(false);
  r.free_all_and_trim();
  if (r.dev->used_bytes() != 0) __builtin_trap();
  return 0;
}
