#pragma once
// gpumem report: one self-contained HTML page about a trace — the replay's figures, the doctor's
// findings, the live/reserved timeline, the pool's segment map at peak reserved, a histogram of
// request sizes and the largest live blocks at the peak. Data goes in as one JSON blob in a
// <script type="application/json"> tag; inline JS draws it into SVG. Nothing is fetched.
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <limits>
#include <string>
#include <vector>

#include "gpumem/doctor.hpp"
#include "gpumem/replay.hpp"
#include "gpumem/trace.hpp"

namespace gpumem {

// Which trace rows a block of the segment map at peak came from (only blocks that are one request).
struct block_lifetime {
  static constexpr std::uint64_t never = std::numeric_limits<std::uint64_t>::max();
  std::uintptr_t address = 0;    // the resource's address, as in block_info
  std::uint64_t alloc_row = 0;   // record index of the allocate row
  std::uint64_t free_row = never;  // record index of the matching free row; never: not freed
  std::uint64_t requested_bytes = 0;
};

// Replays `t` again through the pool named in `opts.resource` ("pool" or "pool-segments") up to
// `result.peak_op`, recording which row each address came from, and pairs every live block of
// `result.segment_map_at_peak` that is one request with its allocate and free rows. Empty when the
// resource is not a pool, or when the second replay's block map differs from the result's (the
// pairing would then be a guess).
std::vector<block_lifetime> lifetimes_at_peak(const trace& t, const replay_result& result, const replay_options& opts);

struct report_options {
  std::string title;                       // empty: "gpumem report: <trace>"
  std::size_t max_timeline_points = 2000;  // the timeline is downsampled to at most this many
  std::size_t max_map_rects = 5000;        // beyond it, small neighbouring blocks are merged
  std::size_t top_blocks = 20;             // rows of the largest-live-blocks table
  std::vector<block_lifetime> lifetimes;   // from lifetimes_at_peak, optional
  // The replay whose figures the page's header shows (replay_figures: the names and numbers
  // `gpumem replay --json` prints). A replay that keeps a timeline and a segment map runs a row at a
  // time and so takes longer per op than `gpumem replay`'s; give the plain replay of the same
  // options here to show its time. Null: `result`'s own figures.
  const replay_result* figures = nullptr;
};

// Writes the page. `result` should come from a replay with timeline_points > 0 and
// segment_map_at_peak = true (the page says so where a part is missing).
void write_report_html(std::ostream& out, const trace& t, const replay_result& result, const doctor_report& doctor,
                       const report_options& opts = {});
std::string report_html(const trace& t, const replay_result& result, const doctor_report& doctor,
                        const report_options& opts = {});

}  // namespace gpumem
