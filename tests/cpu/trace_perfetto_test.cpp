// The Perfetto / Chrome trace export: the JSON parses, every event has the keys its "ph" needs with
// the right types, each track's ts rises, counters are never negative, slices nest on their track
// (no begin/end left open), and the figures are the trace's own.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gpumem/trace.hpp"
#include "gpumem/trace_perfetto.hpp"

namespace {

constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
using nlohmann::json;

// Two streams; on stream 1 lifetimes cross (a, b, free a, free b), so they need two lanes; one
// block is freed on the other stream; one is never freed.
gpumem::trace crossing_trace(bool timed = true) {
  gpumem::trace t;
  t.name = "crossing";
  std::int64_t now = 86'400'000'000 - 20;  // 20 µs before midnight: the clock wraps
  auto row = [&](gpumem::trace_action a, std::uint64_t p, std::uint64_t size, std::uint64_t s) {
    now = (now + 10) % 86'400'000'000;
    t.records.push_back({0, timed ? now : -1, a, p, size, s});
    t.lines.push_back(t.records.size() + 1);
  };
  using A = gpumem::trace_action;
  row(A::allocate, 0xa000, 4 * MiB, 1);
  row(A::allocate, 0xb000, 2 * MiB, 1);
  row(A::free, 0xa000, 4 * MiB, 1);
  row(A::allocate, 0xc000, MiB, 2);
  row(A::free, 0xb000, 2 * MiB, 1);
  row(A::free, 0xc000, MiB, 1);  // freed on another stream
  row(A::allocate, 0xd000, 512, 2);  // never freed
  return t;
}

json export_json(const gpumem::trace& t, const gpumem::perfetto_options& o, gpumem::perfetto_summary* sum = nullptr) {
  std::ostringstream out;
  const auto s = gpumem::write_perfetto_json(out, t, o);
  if (sum) *sum = s;
  return json::parse(out.str());
}

// The Trace Event Format's rules this exporter relies on, checked on any file it writes.
void check_schema(const json& j) {
  ASSERT_TRUE(j.is_object());
  ASSERT_TRUE(j.contains("traceEvents") && j["traceEvents"].is_array());
  std::map<std::pair<int, std::uint64_t>, std::int64_t> last_ts;          // per (pid, tid) of slices
  std::map<std::string, std::int64_t> last_counter_ts;                     // per counter name
  std::map<std::pair<int, std::uint64_t>, std::vector<std::int64_t>> open;  // nesting stacks of slice ends
  std::map<std::pair<int, std::uint64_t>, int> begin_end;                  // B minus E per track
  for (const auto& e : j["traceEvents"]) {
    ASSERT_TRUE(e.is_object());
    ASSERT_TRUE(e.contains("ph") && e["ph"].is_string()) << e;
    ASSERT_TRUE(e.contains("name") && e["name"].is_string()) << e;
    ASSERT_TRUE(e.contains("pid") && e["pid"].is_number_integer()) << e;
    ASSERT_TRUE(e.contains("tid") && e["tid"].is_number_integer()) << e;
    const std::string ph = e["ph"];
    const auto track = std::make_pair(e["pid"].get<int>(), e["tid"].get<std::uint64_t>());
    if (ph == "M") {
      ASSERT_TRUE(e.contains("args") && e["args"].is_object()) << e;
      if (e["name"] == "thread_name" || e["name"] == "process_name") {
        ASSERT_TRUE(e["args"].contains("name") && e["args"]["name"].is_string()) << e;
      }
      continue;
    }
    ASSERT_TRUE(e.contains("ts") && e["ts"].is_number_integer()) << e;
    const std::int64_t ts = e["ts"];
    EXPECT_GE(ts, 0) << e;
    if (ph == "C") {
      ASSERT_TRUE(e.contains("args") && e["args"].is_object() && !e["args"].empty()) << e;
      for (const auto& [k, v] : e["args"].items()) {
        ASSERT_TRUE(v.is_number()) << e;
        EXPECT_GE(v.get<double>(), 0.0) << e;
      }
      auto [it, fresh] = last_counter_ts.try_emplace(e["name"], ts);
      if (!fresh) { EXPECT_GT(ts, it->second) << e; }
      it->second = ts;
    } else if (ph == "X") {
      ASSERT_TRUE(e.contains("dur") && e["dur"].is_number_integer()) << e;
      const std::int64_t dur = e["dur"];
      EXPECT_GE(dur, 0) << e;
      ASSERT_TRUE(e.contains("args") && e["args"].is_object()) << e;
      ASSERT_TRUE(e["args"].contains("size") && e["args"]["size"].is_number_unsigned()) << e;
      ASSERT_TRUE(e["args"].contains("pointer") && e["args"]["pointer"].is_string()) << e;
      auto [it, fresh] = last_ts.try_emplace(track, ts);
      if (!fresh) { EXPECT_GE(ts, it->second) << e; }
      it->second = ts;
      // Nesting: slices ended by now close; the rest must enclose this one.
      auto& stack = open[track];
      while (!stack.empty() && stack.back() <= ts) stack.pop_back();
      if (!stack.empty()) { EXPECT_LE(ts + dur, stack.back()) << "slices cross on one track: " << e; }
      stack.push_back(ts + dur);
    } else if (ph == "B" || ph == "E") {
      begin_end[track] += ph == "B" ? 1 : -1;
      EXPECT_GE(begin_end[track], 0) << e;
    } else {
      ADD_FAILURE() << "unexpected ph " << ph;
    }
  }
  for (const auto& [track, n] : begin_end) { EXPECT_EQ(n, 0) << "unbalanced B/E on tid " << track.second; }
}

std::vector<json> events(const json& j, const std::string& ph, const std::string& name = "") {
  std::vector<json> out;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == ph && (name.empty() || e["name"] == name)) out.push_back(e);
  return out;
}

TEST(TracePerfetto, SchemaLiveReservedAndStreams) {
  gpumem::perfetto_summary s;
  const json j = export_json(crossing_trace(), {}, &s);
  check_schema(j);
  EXPECT_TRUE(s.reserved);
  EXPECT_TRUE(s.trace_times);
  EXPECT_TRUE(s.note.empty()) << s.note;
  // Live bytes after each row, ts across midnight still rising by 10 µs.
  const auto live = events(j, "C", "live bytes");
  ASSERT_EQ(live.size(), 7u);
  const std::vector<std::uint64_t> want{4 * MiB, 6 * MiB, 2 * MiB, 3 * MiB, MiB, 0, 512};
  for (std::size_t i = 0; i < live.size(); ++i) {
    EXPECT_EQ(live[i]["ts"], static_cast<std::int64_t>(10 * i));
    EXPECT_EQ(live[i]["args"]["bytes"], want[i]) << i;
  }
  const auto reserved = events(j, "C", "reserved bytes");
  ASSERT_EQ(reserved.size(), 7u);
  for (std::size_t i = 0; i < reserved.size(); ++i)
    EXPECT_GE(reserved[i]["args"]["bytes"].get<std::uint64_t>(), want[i]) << "reserved holds what is live";
  // Slices: four allocations; stream 1's crossing lifetimes on two lanes, stream 2 on one.
  const auto slices = events(j, "X");
  ASSERT_EQ(slices.size(), 4u);
  EXPECT_EQ(s.tracks, 3u);
  std::set<std::string> names;
  for (const auto& e : events(j, "M", "thread_name")) names.insert(e["args"]["name"]);
  EXPECT_EQ(names, (std::set<std::string>{"stream 0x1", "stream 0x1 #1", "stream 0x2"}));
  for (const auto& e : slices) {
    if (e["args"]["pointer"] == "0xa000") {
      EXPECT_EQ(e["ts"], 0);
      EXPECT_EQ(e["dur"], 20);
      EXPECT_EQ(e["args"]["size"], 4 * MiB);
    }
    if (e["args"]["pointer"] == "0xc000") { EXPECT_EQ(e["args"]["freed_on_stream"], "0x1"); }
    if (e["args"]["pointer"] == "0xd000") {
      EXPECT_FALSE(e["args"]["freed"].get<bool>());
      EXPECT_EQ(e["dur"], 0);  // allocated on the last row
    }
  }
}

TEST(TracePerfetto, LiveOnlyAndUntimedSayWhatIsMissing) {
  gpumem::perfetto_options o;
  o.reserved = false;
  gpumem::perfetto_summary s;
  const json j = export_json(crossing_trace(false), o, &s);
  check_schema(j);
  EXPECT_FALSE(s.reserved);
  EXPECT_FALSE(s.trace_times);
  EXPECT_TRUE(events(j, "C", "reserved bytes").empty());
  EXPECT_EQ(events(j, "C", "live bytes").size(), 7u);
  EXPECT_NE(s.note.find("reserved bytes not exported"), std::string::npos) << s.note;
  EXPECT_NE(s.note.find("row index"), std::string::npos) << s.note;
  EXPECT_EQ(j["otherData"]["reserved"], "not exported");
}

// A bundled example with two streams and many lifetimes: the schema holds at scale.
TEST(TracePerfetto, BundledExampleKeepsTheSchema) {
  const auto t = gpumem::read_trace(std::filesystem::path(GPUMEM_EXAMPLES) / "vision_two_streams.csv");
  gpumem::perfetto_summary s;
  const json j = export_json(t, {}, &s);
  check_schema(j);
  EXPECT_TRUE(s.reserved);
  EXPECT_EQ(events(j, "X").size(), 929u);
  const auto live = events(j, "C", "live bytes");
  std::uint64_t peak = 0;
  for (const auto& e : live) peak = std::max(peak, e["args"]["bytes"].get<std::uint64_t>());
  const auto r = gpumem::replay(t, {});
  EXPECT_EQ(peak, r.peak_live_bytes);
}

TEST(TracePerfetto, UnknownResourceIsRefused) {
  gpumem::perfetto_options o;
  o.replay.resource = "no-such-resource";
  std::ostringstream out;
  EXPECT_THROW(gpumem::write_perfetto_json(out, crossing_trace(), o), std::invalid_argument);
}

}  // namespace
