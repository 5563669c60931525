// A trace's timeline as Chrome trace / Perfetto JSON (include/gpumem/trace_perfetto.hpp): the
// clock from the trace's times, live bytes from its rows, reserved bytes from a replay's per-row
// timeline, and each allocation a slice on a lane of its stream.
#include "gpumem/trace_perfetto.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <ostream>
#include <unordered_map>
#include <vector>

#include "report_json.hpp"

namespace gpumem {
namespace {

constexpr std::int64_t day_us = std::int64_t{86400} * 1000000;
constexpr int pid = 1;

// The time of every row in µs since the first, or the row index when any row has no time.
std::vector<std::int64_t> row_clock(const trace& t, bool& from_times) {
  from_times = !t.records.empty() &&
               std::all_of(t.records.begin(), t.records.end(), [](const trace_record& r) { return r.time_us >= 0; });
  std::vector<std::int64_t> ts(t.records.size());
  std::int64_t now = 0;
  for (std::size_t i = 0; i < t.records.size(); ++i) {
    if (!from_times) {
      ts[i] = static_cast<std::int64_t>(i);
      continue;
    }
    if (i > 0) {
      std::int64_t dt = t.records[i].time_us - t.records[i - 1].time_us;
      if (dt < 0) dt += day_us;  // the wall clock passed midnight
      now += dt;
    }
    ts[i] = now;
  }
  return ts;
}

struct slice {
  std::int64_t ts = 0, end = 0;
  std::uint64_t size = 0, pointer = 0, free_stream = 0;
  bool freed = false;
  std::size_t lane = 0;  // index into lanes
};

// A stream's lanes: a slice goes on the first lane where, once the slices that ended by its start
// are closed, it nests inside the innermost open one (or none is open).
struct lanes_of_stream {
  std::vector<std::vector<std::int64_t>> open_ends;  // per lane, a stack of open slices' ends
  std::vector<std::size_t> ids;                      // per lane, its index in the global lane list
};

}  // namespace

perfetto_summary write_perfetto_json(std::ostream& out, const trace& t, const perfetto_options& opts) {
  perfetto_summary sum;
  const std::vector<std::int64_t> ts = row_clock(t, sum.trace_times);
  const std::size_t rows = t.records.size();

  // Reserved after each row, from a replay that keeps a point per row.
  std::vector<std::uint64_t> reserved;
  if (opts.reserved && rows > 0) {
    replay_options o = opts.replay;
    o.timeline_points = rows;
    o.segment_map_at_peak = false;
    o.passes = 1;
    o.min_ops = 0;
    const replay_result r = replay(t, o);
    if (r.timeline.size() == rows) {
      reserved.resize(rows);
      for (const auto& p : r.timeline) reserved[p.op] = p.reserved_bytes;
      sum.reserved = true;
    } else {
      sum.note = fmt::format("reserved bytes not exported: the replay through {} kept {} timeline points for {} rows",
                             o.resource, r.timeline.size(), rows);
    }
  } else if (!opts.reserved) {
    sum.note = "reserved bytes not exported: no replay was asked for (live bytes only)";
  }
  if (!sum.trace_times)
    sum.note += std::string(sum.note.empty() ? "" : "; ") + "the trace has rows without times: ts is the row index";

  // Allocations as slices, from allocate to free (or to the last row when never freed).
  std::vector<slice> slices;
  std::vector<std::uint64_t> stream_of_slice;
  std::unordered_map<std::uint64_t, std::size_t> open;  // pointer -> slice
  std::vector<std::uint64_t> live(rows, 0);
  std::uint64_t live_bytes = 0;
  const std::int64_t last_ts = rows ? ts.back() : 0;
  for (std::size_t i = 0; i < rows; ++i) {
    const trace_record& r = t.records[i];
    if (r.action == trace_action::allocate && r.pointer != 0) {
      open[r.pointer] = slices.size();
      slices.push_back({ts[i], last_ts, r.size, r.pointer, 0, false, 0});
      stream_of_slice.push_back(r.stream);
      live_bytes += r.size;
    } else if (r.action == trace_action::free) {
      auto it = open.find(r.pointer);
      if (it != open.end()) {
        slice& s = slices[it->second];
        s.end = ts[i];
        s.freed = true;
        s.free_stream = r.stream;
        live_bytes -= s.size;
        open.erase(it);
      }
    }
    live[i] = live_bytes;
  }

  // Lanes: slices by start (ties: the longer first, so a slice opens before those inside it).
  std::vector<std::size_t> order(slices.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return slices[a].ts != slices[b].ts ? slices[a].ts < slices[b].ts : slices[a].end > slices[b].end;
  });
  std::vector<std::uint64_t> streams;  // in order of first use
  std::unordered_map<std::uint64_t, lanes_of_stream> by_stream;
  struct lane_info {
    std::uint64_t stream;
    std::size_t index;  // within its stream
  };
  std::vector<lane_info> lanes;
  for (const std::size_t k : order) {
    slice& s = slices[k];
    const std::uint64_t stream = stream_of_slice[k];
    auto [it, fresh] = by_stream.try_emplace(stream);
    if (fresh) streams.push_back(stream);
    lanes_of_stream& ls = it->second;
    std::size_t lane = 0;
    for (; lane < ls.open_ends.size(); ++lane) {
      auto& stack = ls.open_ends[lane];
      while (!stack.empty() && stack.back() <= s.ts) stack.pop_back();
      if (stack.empty() || stack.back() >= s.end) break;
    }
    if (lane == ls.open_ends.size()) {
      ls.open_ends.emplace_back();
      ls.ids.push_back(lanes.size());
      lanes.push_back({stream, lane});
    }
    ls.open_ends[lane].push_back(s.end);
    s.lane = ls.ids[lane];
  }
  sum.tracks = lanes.size();
  sum.slices = slices.size();

  // Thread ids 1, 2, ...: streams in order of first use, each stream's lanes together.
  std::unordered_map<std::uint64_t, std::size_t> rank_of_stream;
  for (std::size_t i = 0; i < streams.size(); ++i) rank_of_stream[streams[i]] = i;
  std::vector<std::size_t> by_tid(lanes.size());
  for (std::size_t l = 0; l < lanes.size(); ++l) by_tid[l] = l;
  std::sort(by_tid.begin(), by_tid.end(), [&](std::size_t a, std::size_t b) {
    const std::size_t ra = rank_of_stream[lanes[a].stream], rb = rank_of_stream[lanes[b].stream];
    return ra != rb ? ra < rb : lanes[a].index < lanes[b].index;
  });
  std::vector<std::uint64_t> tid(lanes.size());
  for (std::size_t k = 0; k < by_tid.size(); ++k) tid[by_tid[k]] = k + 1;
  auto tid_of = [&](std::size_t lane) { return tid[lane]; };

  detail::json_out j;
  j.open('{');
  j.kv("displayTimeUnit", "ms");
  j.key("traceEvents");
  j.open('[');
  auto event_head = [&](const char* ph, std::string_view name, std::uint64_t tid) {
    j.open('{');
    j.kv("ph", ph);
    j.kv("name", name);
    j.kv("pid", pid);
    j.kv("tid", tid);
    ++sum.events;
  };
  event_head("M", "process_name", 0);
  j.key("args");
  j.open('{');
  j.kv("name", "gpumem: " + t.name);
  j.close('}');
  j.close('}');
  for (const std::size_t l : by_tid) {
    const std::string name = lanes[l].index == 0 ? fmt::format("stream {:#x}", lanes[l].stream)
                                                 : fmt::format("stream {:#x} #{}", lanes[l].stream, lanes[l].index);
    event_head("M", "thread_name", tid_of(l));
    j.key("args");
    j.open('{');
    j.kv("name", name);
    j.close('}');
    j.close('}');
    event_head("M", "thread_sort_index", tid_of(l));
    j.key("args");
    j.open('{');
    j.kv("sort_index", tid_of(l));
    j.close('}');
    j.close('}');
  }
  // Counters: one value per distinct time, the last row's at that time.
  auto counter = [&](const char* name, const std::vector<std::uint64_t>& v) {
    for (std::size_t i = 0; i < rows; ++i) {
      if (i + 1 < rows && ts[i + 1] == ts[i]) continue;
      event_head("C", name, 0);
      j.kv("ts", ts[i]);
      j.key("args");
      j.open('{');
      j.kv("bytes", v[i]);
      j.close('}');
      j.close('}');
    }
  };
  counter("live bytes", live);
  if (sum.reserved) counter("reserved bytes", reserved);
  // Slices, lane by lane in start order: each track's ts rises.
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return slices[a].lane < slices[b].lane; });
  for (const std::size_t k : order) {
    const slice& s = slices[k];
    event_head("X", fmt::format("{} B", s.size), tid_of(s.lane));
    j.kv("ts", s.ts);
    j.kv("dur", s.end - s.ts);
    j.key("args");
    j.open('{');
    j.kv("size", s.size);
    j.kv("pointer", fmt::format("{:#x}", s.pointer));
    j.kv("freed", s.freed);
    if (s.freed && s.free_stream != stream_of_slice[k]) j.kv("freed_on_stream", fmt::format("{:#x}", s.free_stream));
    j.close('}');
    j.close('}');
  }
  j.close(']');
  j.key("otherData");
  j.open('{');
  j.kv("trace", t.name);
  j.kv("clock", sum.trace_times ? "µs since the trace's first row" : "row index (the trace has rows without times)");
  j.kv("reserved", sum.reserved ? "from a replay through " + opts.replay.resource + " on the simulated device"
                                : std::string("not exported"));
  if (!sum.note.empty()) j.kv("note", sum.note);
  j.close('}');
  j.close('}');
  out << j.s << '\n';
  return sum;
}

}  // namespace gpumem
