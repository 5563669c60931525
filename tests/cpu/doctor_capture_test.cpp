// gpumem doctor and CUDA graph capture: the trace rows capture_begin / capture_end (read apart
// from the records, so old readers and replay see the same allocations), their errors, and the
// capture-frees-graph-memory finding.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "gpumem/doctor.hpp"
#include "gpumem/trace.hpp"
#include "gpumem/trace_adaptor.hpp"

namespace {

using gpumem::severity;

gpumem::trace parse(const std::string& rows) {
  std::istringstream in("Thread,Time,Action,Pointer,Size,Stream\n" + rows);
  return gpumem::parse_trace(in, "capture.csv");
}

// A decode step captured on stream 0x5: its input allocated before the capture on the same stream,
// temporaries allocated and freed inside.
const std::string captured_step =
    "1,00:00:00.000001,allocate,0x1000,1048576,0x5\n"  // the graph's input
    "1,00:00:00.000002,capture_begin,0x0,0,0x5\n"
    "1,00:00:00.000003,allocate,0x200000,4194304,0x5\n"
    "1,00:00:00.000004,free,0x200000,4194304,0x5\n"
    "1,00:00:00.000005,capture_end,0x0,0,0x5\n";

TEST(DoctorCapture, CaptureRowsAreReadApartFromTheRecords) {
  const gpumem::trace t = parse(captured_step + "1,00:00:00.000006,free,0x1000,1048576,0x5\n");
  ASSERT_EQ(t.records.size(), 4u) << "capture rows are not allocation records";
  ASSERT_EQ(t.captures.size(), 1u);
  EXPECT_EQ(t.captures[0].stream, 0x5u);
  EXPECT_EQ(t.captures[0].first, 1u);
  EXPECT_EQ(t.captures[0].last, 3u);
  EXPECT_EQ(t.captures[0].begin_line, 3u);
  EXPECT_EQ(t.lines[3], 7u);
}

TEST(DoctorCapture, NoFindingWhenTheGraphsInputOutlivesTheCapture) {
  const gpumem::trace t = parse(captured_step + "1,00:00:00.000006,free,0x1000,1048576,0x5\n");
  const gpumem::doctor_report r = gpumem::diagnose(t);
  EXPECT_EQ(r.find("capture-frees-graph-memory"), nullptr);
}

TEST(DoctorCapture, FreeingTheGraphsInputDuringTheCaptureIsAnError) {
  const gpumem::trace t = parse(
      "1,00:00:00.000001,allocate,0x1000,1048576,0x5\n"
      "1,00:00:00.000002,allocate,0x9000,65536,0x7\n"
      "1,00:00:00.000003,capture_begin,0x0,0,0x5\n"
      "1,00:00:00.000004,allocate,0x200000,4194304,0x5\n"
      "1,00:00:00.000005,free,0x1000,1048576,0x5\n"       // the input, on the capturing stream
      "1,00:00:00.000006,free,0x9000,65536,0x7\n"         // another stream's block: not the graph's
      "1,00:00:00.000007,free,0x200000,4194304,0x5\n"     // allocated inside: the graph pool's
      "1,00:00:00.000008,capture_end,0x0,0,0x5\n");
  const gpumem::doctor_report r = gpumem::diagnose(t);
  const gpumem::finding* f = r.find("capture-frees-graph-memory");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->level, severity::error);
  EXPECT_EQ(f->at("frees_during_capture"), 1.0);
  EXPECT_EQ(f->at("freed_bytes"), 1048576.0);
  EXPECT_EQ(f->at("first_free_line"), 6.0);
  EXPECT_EQ(f->at("captures"), 1.0);
  EXPECT_NE(f->summary.find("1 block(s)"), std::string::npos) << f->summary;
}

TEST(DoctorCapture, AFreeAfterTheCaptureEndedIsNotFlagged) {
  const gpumem::trace t = parse(
      "1,00:00:00.000001,allocate,0x1000,1048576,0x5\n"
      "1,00:00:00.000002,capture_begin,0x0,0,0x5\n"
      "1,00:00:00.000003,capture_end,0x0,0,0x5\n"
      "1,00:00:00.000004,free,0x1000,1048576,0x5\n");
  EXPECT_EQ(gpumem::diagnose(t).find("capture-frees-graph-memory"), nullptr);
}

TEST(DoctorCapture, AnUnendedCaptureCoversTheRestOfTheTrace) {
  const gpumem::trace t = parse(
      "1,00:00:00.000001,allocate,0x1000,1048576,0x5\n"
      "1,00:00:00.000002,capture_begin,0x0,0,0x5\n"
      "1,00:00:00.000003,free,0x1000,1048576,0x5\n");
  ASSERT_EQ(t.captures.size(), 1u);
  EXPECT_EQ(t.captures[0].last, SIZE_MAX);
  EXPECT_NE(gpumem::diagnose(t).find("capture-frees-graph-memory"), nullptr);
}

TEST(DoctorCapture, MisplacedCaptureRowsAreClearErrors) {
  auto error_of = [](const std::string& rows) {
    try {
      parse(rows);
    } catch (const gpumem::trace_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("1,,capture_end,0x0,0,0x5\n").find("capture_end on stream 0x5, which has no capture_begin"),
            std::string::npos);
  EXPECT_NE(error_of("1,,capture_begin,0x0,0,0x5\n1,,capture_begin,0x0,0,0x5\n")
                .find("which captures already (capture_begin at line 2)"),
            std::string::npos);
  EXPECT_NE(error_of("1,,capture,0x0,0,0x5\n").find("capture_begin or capture_end"), std::string::npos);
}

// What the trace adaptor's sink and write_capture_record write reads back as captures.
TEST(DoctorCapture, WrittenCaptureRowsReadBack) {
  std::ostringstream out;
  {
    gpumem::detail::trace_sink sink(out, {});
    int x = 0;
    sink.record(gpumem::trace_action::allocate, &x, 4096, gpumem::stream_ref{5});
    sink.record_capture(true, gpumem::stream_ref{5});
    sink.record(gpumem::trace_action::free, &x, 4096, gpumem::stream_ref{5});
    sink.record_capture(false, gpumem::stream_ref{5});
    sink.flush();
  }
  gpumem::write_capture_record(out, 1, -1, true, 9);
  gpumem::write_capture_record(out, 1, 3723000001, false, 9);
  std::istringstream in(out.str());
  const gpumem::trace t = gpumem::parse_trace(in, "written.csv");
  ASSERT_EQ(t.records.size(), 2u);
  ASSERT_EQ(t.captures.size(), 2u);
  EXPECT_EQ(t.captures[0].stream, 5u);
  EXPECT_EQ(t.captures[0].first, 1u);
  EXPECT_EQ(t.captures[0].last, 2u);
  EXPECT_EQ(t.captures[1].stream, 9u);
  EXPECT_NE(out.str().find(",01:02:03.000001,capture_end,0x0,0,0x9"), std::string::npos) << out.str();
  EXPECT_NE(gpumem::diagnose(t).find("capture-frees-graph-memory"), nullptr);
}

}  // namespace
