// gpumem report: the page's data. C++ gathers and condenses it (timeline to <= 2000 points,
// segment map to <= 5000 rectangles, histogram, top blocks) into one JSON blob; the page
// (report_page.cpp) draws it. See include/gpumem/report.hpp.
#include "gpumem/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <ostream>
#include <sstream>
#include <unordered_map>

#include "report_json.hpp"
#include "report_page.hpp"
#include "gpumem/replay_figures.hpp"

namespace gpumem {
namespace {

using detail::json_out;

int state_code(block_info::state s) {
  switch (s) {
    case block_info::state::live: return 0;
    case block_info::state::cached: return 1;
    case block_info::state::unmapped: return 2;
  }
  return 1;
}

std::string hex(std::uint64_t v) { return fmt::format("{:#x}", v); }

// One drawn rectangle of the segment map: one block, or small neighbours merged.
struct map_rect {
  std::uintptr_t address = 0;
  std::size_t bytes = 0;
  std::size_t by_state[3] = {0, 0, 0};
  std::size_t count = 0;
  std::size_t segment = 0;
  std::uint64_t stream = 0;
  bool mixed_streams = false;
  int dominant() const {
    int d = 0;
    for (int i = 1; i < 3; ++i)
      if (by_state[i] > by_state[d]) d = i;
    return d;
  }
};

std::vector<map_rect> condense(const std::vector<block_info>& blocks, std::size_t max_rects) {
  std::vector<map_rect> out;
  auto one = [](const block_info& b) {
    map_rect r;
    r.address = b.address;
    r.bytes = b.bytes;
    r.by_state[state_code(b.st)] = b.bytes;
    r.count = 1;
    r.segment = b.segment;
    r.stream = b.stream.value();
    return r;
  };
  if (blocks.size() <= max_rects) {
    for (const auto& b : blocks) out.push_back(one(b));
    return out;
  }
  std::size_t total = 0;
  for (const auto& b : blocks) total += b.bytes;
  std::size_t threshold = std::max<std::size_t>(1, total / max_rects);
  for (;;) {
    out.clear();
    map_rect acc;
    auto flush = [&] {
      if (acc.count) out.push_back(acc);
      acc = {};
    };
    for (const auto& b : blocks) {
      if (acc.count && (acc.segment != b.segment || acc.address + acc.bytes != b.address)) flush();
      if (b.bytes >= threshold) {
        flush();
        out.push_back(one(b));
        continue;
      }
      if (!acc.count) {
        acc = one(b);
      } else {
        acc.bytes += b.bytes;
        acc.by_state[state_code(b.st)] += b.bytes;
        acc.mixed_streams |= acc.stream != b.stream.value();
        ++acc.count;
      }
      if (acc.bytes >= threshold) flush();
    }
    flush();
    if (out.size() <= max_rects) return out;
    threshold *= 2;
  }
}


}  // namespace


std::string report_html(const trace& t, const replay_result& r, const doctor_report& d, const report_options& opts) {
  const auto& recs = t.records;
  const std::uint64_t rows = recs.size();
  json_out j;
  j.open('{');
  j.kv("title", opts.title.empty() ? "gpumem report: " + t.name : opts.title);

  // ---- trace summary ----
  std::uint64_t allocations = 0, frees = 0, failures = 0;
  std::int64_t first_time = -1, last_time = -1;
  for (const auto& rec : recs) {
    allocations += rec.action == trace_action::allocate;
    frees += rec.action == trace_action::free;
    failures += rec.action == trace_action::allocate_failure;
    if (rec.time_us >= 0) {
      if (first_time < 0) first_time = rec.time_us;
      last_time = rec.time_us;
    }
  }
  j.key("trace");
  j.open('{');
  j.kv("name", t.name);
  j.kv("rows", rows);
  j.kv("allocations", allocations);
  j.kv("frees", frees);
  j.kv("failure_rows", failures);
  j.kv("first_time_us", first_time);
  j.kv("duration_s", first_time >= 0 ? double(last_time - first_time) / 1e6 : 0.0);
  j.close('}');

  auto time_of = [&](std::uint64_t row) -> std::int64_t { return row < rows ? recs[row].time_us : -1; };
  const bool have_map = !r.segment_map_at_peak.empty();

  // ---- replay figures: replay_figures, as `gpumem replay --json` names them ----
  const replay_result& shown = opts.figures ? *opts.figures : r;
  j.key("replay");
  j.open('{');
  j.kv("resource", shown.resource);
  j.key("figures");
  j.open('[');
  for (const auto& f : replay_figures(shown)) {
    j.open('[');
    j.item(f.key);
    if (f.integral)
      j.item(static_cast<std::uint64_t>(f.value));
    else
      j.item(f.value);
    j.item(f.integral);
    j.close(']');
  }
  j.close(']');
  j.kv("peak_op", have_map ? static_cast<std::int64_t>(r.peak_op) : std::int64_t{-1});
  j.kv("peak_time_us", have_map ? time_of(r.peak_op) : std::int64_t{-1});
  j.close('}');

  // ---- doctor ----
  j.key("findings");
  j.open('[');
  for (const auto& f : d.findings) {
    j.open('{');
    j.kv("id", f.id);
    j.kv("severity", to_string(f.level));
    j.kv("rank", f.cost_share);  // the doctor's order: costliest first
    j.kv("cost_bytes", f.cost_bytes);
    j.kv("cost_seconds", f.cost_seconds);
    j.kv("summary", f.summary);
    j.kv("advice", f.advice);
    j.key("figures");
    j.open('[');
    for (const auto& g : f.figures) {
      j.open('[');
      j.item(g.key);
      j.item(g.value);
      j.item(g.integral);
      j.close(']');
    }
    j.close(']');
    j.close('}');
  }
  j.close(']');
  j.key("skipped");
  j.open('[');
  for (const auto& s : d.skipped) j.item(s);
  j.close(']');

  // ---- timeline: live from the trace itself (exact, max per bucket), reserved from the replay's samples ----
  {
    const std::size_t max_points = std::max<std::size_t>(2, opts.max_timeline_points);
    const std::uint64_t bucket = rows ? (rows + max_points - 1) / max_points : 1;
    const std::uint64_t nb = rows ? (rows + bucket - 1) / bucket : 0;
    std::vector<std::uint64_t> b_row(nb), b_first(nb), b_last(nb), b_live(nb, 0), b_res(nb, 0);
    std::vector<bool> b_has_res(nb, false);
    std::unordered_map<std::uint64_t, std::uint64_t> live_size;
    std::uint64_t live = 0;
    for (std::uint64_t i = 0; i < rows; ++i) {
      const auto& rec = recs[i];
      if (rec.action == trace_action::allocate) {
        live_size[rec.pointer] = rec.size;
        live += rec.size;
      } else if (rec.action == trace_action::free) {
        auto it = live_size.find(rec.pointer);
        if (it != live_size.end()) {
          live -= it->second;
          live_size.erase(it);
        }
      }
      const std::uint64_t b = i / bucket;
      if (i % bucket == 0) {
        b_first[b] = i;
        b_row[b] = i;
        b_live[b] = live;
      } else if (live > b_live[b]) {
        b_live[b] = live;
        b_row[b] = i;
      }
      b_last[b] = i;
    }
    for (const auto& p : r.timeline) {
      if (p.op >= rows) continue;
      const std::uint64_t b = p.op / bucket;
      b_res[b] = std::max<std::uint64_t>(b_res[b], p.reserved_bytes);
      b_has_res[b] = true;
    }
    if (have_map && r.peak_op < rows) {
      const std::uint64_t b = r.peak_op / bucket;
      b_res[b] = std::max<std::uint64_t>(b_res[b], r.peak_reserved_bytes);
      b_has_res[b] = true;
    }
    for (std::uint64_t b = 1; b < nb; ++b)
      if (!b_has_res[b]) b_res[b] = b_res[b - 1];
    j.key("timeline");
    j.open('{');
    j.kv("max_points", max_points);
    j.kv("bucket", bucket);
    j.kv("samples", r.timeline.size());
    auto arr = [&](const char* k, const std::vector<std::uint64_t>& v) {
      j.key(k);
      j.open('[');
      for (auto x : v) j.item(x);
      j.close(']');
    };
    arr("row", b_row);
    arr("first", b_first);
    arr("last", b_last);
    arr("live", b_live);
    if (!r.timeline.empty())
      arr("reserved", b_res);
    else
      arr("reserved", {});
    j.key("time");
    j.open('[');
    for (auto x : b_row) j.item(time_of(x));
    j.close(']');
    j.close('}');
  }

  // ---- segment map and lifetimes ----
  std::unordered_map<std::uintptr_t, std::size_t> lifetime_of;
  for (std::size_t i = 0; i < opts.lifetimes.size(); ++i) lifetime_of[opts.lifetimes[i].address] = i;
  j.key("lifetimes");
  j.open('[');
  for (const auto& lt : opts.lifetimes) {
    const bool freed = lt.free_row != block_lifetime::never;
    j.open('[');
    j.item(lt.address);
    j.item(lt.requested_bytes);
    j.item(lt.alloc_row);
    j.item(time_of(lt.alloc_row));
    j.item(freed ? static_cast<std::int64_t>(lt.free_row) : std::int64_t{-1});
    j.item(freed ? time_of(lt.free_row) : std::int64_t{-1});
    j.close(']');
  }
  j.close(']');
  j.kv("lifetimes_paired", !opts.lifetimes.empty());
  j.kv("lifetimes_note", !have_map ? "there is no segment map."
                                   : "the generator could not pair the blocks with the trace's rows for this resource.");

  std::vector<std::uint64_t> streams;
  std::unordered_map<std::uint64_t, int> stream_index;
  auto stream_idx = [&](std::uint64_t s) {
    auto it = stream_index.find(s);
    if (it != stream_index.end()) return it->second;
    const int k = static_cast<int>(streams.size());
    streams.push_back(s);
    stream_index[s] = k;
    return k;
  };
  auto block_row = [&](const map_rect& m) {
    j.open('[');
    j.item(m.address);
    j.item(m.bytes);
    j.item(m.dominant());
    j.item(m.mixed_streams ? -1 : stream_idx(m.stream));
    j.item(m.segment);
    j.item(m.count);
    j.item(m.by_state[0]);
    j.item(m.by_state[1]);
    j.item(m.by_state[2]);
    auto it = m.count == 1 ? lifetime_of.find(m.address) : lifetime_of.end();
    j.item(it == lifetime_of.end() ? std::int64_t{-1} : static_cast<std::int64_t>(it->second));
    j.close(']');
  };
  const std::vector<map_rect> rects = condense(r.segment_map_at_peak, std::max<std::size_t>(16, opts.max_map_rects));
  std::size_t merge_below = 0;
  for (const auto& m : rects)
    if (m.count > 1) merge_below = std::max(merge_below, m.bytes);
  j.key("map");
  j.open('{');
  j.kv("blocks", r.segment_map_at_peak.size());
  j.kv("max_rects", opts.max_map_rects);
  j.kv("merged", rects.size() < r.segment_map_at_peak.size());
  j.kv("merge_below", merge_below);
  j.key("rects");
  j.open('[');
  for (const auto& m : rects) block_row(m);
  j.close(']');
  // Streams of the map (and of the top table, which uses the same index).
  std::vector<const block_info*> live_blocks;
  for (const auto& b : r.segment_map_at_peak)
    if (b.st == block_info::state::live) live_blocks.push_back(&b);
  std::stable_sort(live_blocks.begin(), live_blocks.end(),
                   [](const block_info* a, const block_info* b) { return a->bytes > b->bytes; });
  if (live_blocks.size() > opts.top_blocks) live_blocks.resize(opts.top_blocks);
  std::string top_json;
  {
    json_out saved = j;
    j = json_out{};
    j.open('[');
    for (const block_info* b : live_blocks) {
      map_rect m;
      m.address = b->address;
      m.bytes = b->bytes;
      m.by_state[0] = b->bytes;
      m.count = 1;
      m.segment = b->segment;
      m.stream = b->stream.value();
      block_row(m);
    }
    j.close(']');
    top_json = std::move(j.s);
    j = std::move(saved);
  }
  j.key("streams");
  j.open('[');
  for (auto s : streams) j.item(hex(s));
  j.close(']');
  j.close('}');
  j.key("top");
  j.raw(top_json);

  // ---- histogram of request sizes, log2 buckets (-1: size 0) ----
  std::map<int, std::pair<std::uint64_t, std::uint64_t>> hist;
  for (const auto& rec : recs) {
    if (rec.action != trace_action::allocate) continue;
    const int k = rec.size ? static_cast<int>(std::bit_width(rec.size)) - 1 : -1;
    auto& e = hist[k];
    ++e.first;
    e.second += rec.size;
  }
  j.key("histogram");
  j.open('[');
  for (const auto& [k, e] : hist) {
    j.open('{');
    j.kv("log2", k);
    j.kv("count", e.first);
    j.kv("bytes", e.second);
    j.close('}');
  }
  j.close(']');
  j.close('}');

  return detail::report_page(opts.title.empty() ? "gpumem report: " + t.name : opts.title, j.s);
}

void write_report_html(std::ostream& out, const trace& t, const replay_result& result, const doctor_report& doctor,
                       const report_options& opts) {
  out << report_html(t, result, doctor, opts);
}

}  // namespace gpumem
