// gpumem report: the HTML page. C++ gathers and condenses the data (timeline to <= 2000 points,
// segment map to <= 5000 rectangles, histogram, top blocks) into one JSON blob; the page's inline
// JS draws it. See include/gpumem/report.hpp.
#include "gpumem/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <ostream>
#include <sstream>
#include <unordered_map>

#include "gpumem/pool.hpp"
#include "gpumem/sim_device.hpp"
#include "report_page.hpp"

namespace gpumem {
namespace {

// A minimal JSON writer: the library does not depend on a JSON package.
class json_out {
 public:
  std::string s;
  void raw(std::string_view v) { s += v; }
  void str(std::string_view v) {
    s += '"';
    for (unsigned char c : v) {
      switch (c) {
        case '"': s += "\\\""; break;
        case '\\': s += "\\\\"; break;
        case '\n': s += "\\n"; break;
        case '\r': s += "\\r"; break;
        case '\t': s += "\\t"; break;
        case '<': s += "\\u003c"; break;  // never "</script>" inside the blob
        case '>': s += "\\u003e"; break;
        case '&': s += "\\u0026"; break;
        default:
          if (c < 0x20)
            s += fmt::format("\\u{:04x}", c);
          else
            s += static_cast<char>(c);
      }
    }
    s += '"';
  }
  void num(std::uint64_t v) { s += fmt::format("{}", v); }
  void num(std::int64_t v) { s += fmt::format("{}", v); }
  void num(double v) { s += std::isfinite(v) ? fmt::format("{:.6g}", v) : std::string("null"); }
  void key(std::string_view k) {
    comma();
    str(k);
    s += ':';
  }
  void open(char c) {
    comma();
    s += c;
  }
  void close(char c) { s += c; }
  // Before a key or an array item: a comma unless first in its object or array.
  void comma() {
    if (!s.empty() && s.back() != '[' && s.back() != '{' && s.back() != ':') s += ',';
  }
  template <class T>
  void kv(std::string_view k, const T& v) {
    key(k);
    val(v);
  }
  void val(std::string_view v) { str(v); }
  void val(const std::string& v) { str(v); }
  void val(const char* v) { str(v); }
  void val(bool v) { s += v ? "true" : "false"; }
  void val(double v) { num(v); }
  template <class T>
    requires std::is_integral_v<T>
  void val(T v) {
    if constexpr (std::is_signed_v<T>)
      num(static_cast<std::int64_t>(v));
    else
      num(static_cast<std::uint64_t>(v));
  }
  template <class T>
  void item(const T& v) {
    comma();
    val(v);
  }
};

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
    r.stream = b.stream;
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
        acc.mixed_streams |= acc.stream != b.stream;
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

std::vector<block_lifetime> lifetimes_at_peak(const trace& t, const replay_result& result, const replay_options& opts) {
  if ((opts.resource != "pool" && opts.resource != "pool-segments") || result.segment_map_at_peak.empty()) return {};
  const std::uint64_t end = std::min<std::uint64_t>(result.peak_op + 1, t.records.size());
  struct open_alloc {
    void* addr = nullptr;
    std::uint64_t bytes = 0;
    std::uint64_t row = 0;
    stream_ref stream = 0;
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
          a = p.allocate(rec.size, default_alignment, rec.stream);
        } catch (const out_of_memory&) {
          a = nullptr;
        }
        open[rec.pointer] = {a, rec.size, i, rec.stream};
      } else if (rec.action == trace_action::free) {
        auto it = open.find(rec.pointer);
        if (it == open.end()) continue;
        if (it->second.addr) p.deallocate(it->second.addr, it->second.bytes, default_alignment, rec.stream);
        open.erase(it);
      }
    }
    blocks = p.blocks();
    for (auto& [ptr, a] : open)
      if (a.addr) p.deallocate(a.addr, a.bytes, default_alignment, 0);
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

  // ---- replay figures ----
  j.key("replay");
  j.open('{');
  j.kv("resource", r.resource);
  j.kv("ops", r.ops);
  j.kv("peak_live_bytes", r.peak_live_bytes);
  j.kv("peak_reserved_bytes", r.peak_reserved_bytes);
  j.kv("final_reserved_bytes", r.final_reserved_bytes);
  j.kv("fragmentation", r.fragmentation);
  j.kv("ns_per_op", r.ns_per_op);
  j.kv("failed_allocs", r.failed_allocs);
  j.kv("trace_failures", r.trace_failures);
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
    j.kv("rank", static_cast<int>(f.level));
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
      m.stream = b->stream;
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

  // ---- the page ----
  std::string page = detail::report_page_template;
  auto replace = [&](std::string_view what, const std::string& with) {
    const auto at = page.find(what);
    if (at != std::string::npos) page.replace(at, what.size(), with);
  };
  std::string title = opts.title.empty() ? "gpumem report: " + t.name : opts.title;
  std::string safe;
  for (char c : title) {
    switch (c) {
      case '<': safe += "&lt;"; break;
      case '>': safe += "&gt;"; break;
      case '&': safe += "&amp;"; break;
      default: safe += c;
    }
  }
  replace("@TITLE@", safe);
  replace("@DATA@", j.s);
  return page;
}

void write_report_html(std::ostream& out, const trace& t, const replay_result& result, const doctor_report& doctor,
                       const report_options& opts) {
  out << report_html(t, result, doctor, opts);
}

}  // namespace gpumem
