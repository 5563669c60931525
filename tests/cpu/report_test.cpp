// gpumem report: the page's data blob is valid JSON with the parts the page draws; a huge segment
// map is merged down to the cap; lifetimes pair live blocks with the trace's rows.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "gpumem/replay_figures.hpp"
#include "gpumem/report.hpp"

namespace {

constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

nlohmann::json blob(const std::string& page) {
  const std::string open = "<script type=\"application/json\" id=\"report-data\">";
  const auto a = page.find(open);
  const auto b = page.find("</script>", a);
  EXPECT_NE(a, std::string::npos);
  return nlohmann::json::parse(page.substr(a + open.size(), b - a - open.size()));
}

gpumem::trace sample_trace() {
  gpumem::trace t;
  t.name = "sample <&> \"trace\"";
  std::int64_t now = 1000;
  auto row = [&](gpumem::trace_action a, std::uint64_t p, std::uint64_t size) {
    t.records.push_back({0, now++, a, p, size, 0});
    t.lines.push_back(t.records.size() + 1);
  };
  for (std::uint64_t i = 0; i < 50; ++i) row(gpumem::trace_action::allocate, 0x1000 + i * 0x10000000, (i + 1) * MiB + 100);
  for (std::uint64_t i = 0; i < 50; i += 2) row(gpumem::trace_action::free, 0x1000 + i * 0x10000000, (i + 1) * MiB + 100);
  for (std::uint64_t i = 0; i < 300; ++i) row(gpumem::trace_action::allocate, 0x9000000000 + i * 0x1000, 512);
  return t;
}

TEST(Report, PageCarriesValidDataAndLifetimes) {
  const auto t = sample_trace();
  gpumem::replay_options o;
  o.timeline_points = 2000;
  o.segment_map_at_peak = true;
  const auto r = gpumem::replay(t, o);
  const auto d = gpumem::diagnose(t);
  gpumem::report_options ro;
  ro.lifetimes = gpumem::lifetimes_at_peak(t, r, o);
  EXPECT_FALSE(ro.lifetimes.empty());
  const std::string page = gpumem::report_html(t, r, d, ro);
  EXPECT_EQ(page.find("<script src"), std::string::npos);
  const auto j = blob(page);
  EXPECT_EQ(j["trace"]["rows"], t.records.size());
  EXPECT_EQ(j["replay"]["figures"][1][0], "peak_live_bytes");
  EXPECT_EQ(j["replay"]["figures"][1][1].get<double>(), double(r.peak_live_bytes));
  EXPECT_LE(j["timeline"]["row"].size(), 2000u);
  EXPECT_EQ(j["timeline"]["row"].size(), j["timeline"]["reserved"].size());
  EXPECT_FALSE(j["map"]["rects"].empty());
  EXPECT_TRUE(j["lifetimes_paired"].get<bool>());
  EXPECT_EQ(j["top"].size(), 20u);
  // The largest request still live is the last one (i = 49).
  EXPECT_GE(j["top"][0][1].get<std::uint64_t>(), 50 * MiB + 100);
}

// The header's figures are replay_figures of the replay given for them, names and numbers: those
// `gpumem replay --json` prints; the timeline and map still come from the instrumented replay.
TEST(Report, FiguresAreThoseReplayPrints) {
  const auto t = sample_trace();
  gpumem::replay_options o;
  o.timeline_points = 2000;
  o.segment_map_at_peak = true;
  const auto drawn = gpumem::replay(t, o);
  gpumem::replay_result plain = gpumem::replay(t, {});
  plain.ns_per_op = 12.5;  // a time no instrumented replay would share by chance
  gpumem::report_options ro;
  ro.figures = &plain;
  const auto j = blob(gpumem::report_html(t, drawn, gpumem::doctor_report{}, ro));
  const auto want = gpumem::replay_figures(plain);
  const auto& got = j["replay"]["figures"];
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i][0].get<std::string>(), want[i].key);
    EXPECT_DOUBLE_EQ(got[i][1].get<double>(), want[i].value) << want[i].key;
    EXPECT_EQ(got[i][2].get<bool>(), want[i].integral) << want[i].key;
  }
  EXPECT_DOUBLE_EQ(got[5][1].get<double>(), 12.5);  // ns_per_op
  EXPECT_FALSE(j["map"]["rects"].empty());          // from the instrumented replay
}

TEST(Report, TimelineAndMapAreCapped) {
  gpumem::trace t;
  t.name = "big";
  for (std::uint64_t i = 0; i < 100000; ++i) t.records.push_back({0, -1, gpumem::trace_action::allocate, 0x100 + i * 16, 256, 0});
  gpumem::replay_result r;
  r.resource = "pool";
  for (std::uint64_t i = 0; i < 20000; ++i)
    r.segment_map_at_peak.push_back({0x7f0000000000 + i * 4096, 4096,
                                     i % 3 ? gpumem::block_info::state::live : gpumem::block_info::state::cached, gpumem::stream_ref{i % 2}, 0});
  r.segment_map_at_peak.push_back({0x7f0000000000 + 20000 * 4096, 512 * MiB, gpumem::block_info::state::unmapped, gpumem::stream_ref{}, 0});
  const auto j = blob(gpumem::report_html(t, r, gpumem::doctor_report{}));
  EXPECT_LE(j["timeline"]["row"].size(), 2000u);
  EXPECT_TRUE(j["timeline"]["reserved"].empty());
  EXPECT_TRUE(j["map"]["merged"].get<bool>());
  EXPECT_LE(j["map"]["rects"].size(), 5000u);
  std::uint64_t bytes = 0, count = 0;
  for (const auto& rect : j["map"]["rects"]) {
    bytes += rect[1].get<std::uint64_t>();
    count += rect[5].get<std::uint64_t>();
  }
  EXPECT_EQ(count, 20001u);
  EXPECT_EQ(bytes, 20000u * 4096 + 512 * MiB);
}

}  // namespace
