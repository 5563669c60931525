// The trace reader and writer: every class of bad input gets a trace_error naming the file, the
// line and the fault; good input (plain, CRLF, gzip, the real shared traces) reads completely.
#include <gtest/gtest.h>
#include <zlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gpumem/doctor.hpp"
#include "gpumem/trace.hpp"
#include "support/temp_path.hpp"

namespace fs = std::filesystem;
using gpumem::trace_action;
using gpumem::trace_error;

namespace {

constexpr const char* header = "Thread,Time,Action,Pointer,Size,Stream\n";

// A temporary file, removed when the test ends.
class temp_file {
 public:
  explicit temp_file(const std::string& bytes, const std::string& suffix = ".csv") {
    path_ = gpumem::testing_support::unique_temp_path("trace", suffix);
    std::ofstream(path_, std::ios::binary) << bytes;
  }
  ~temp_file() { fs::remove(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string gzip(const std::string& text) {
  const auto path = gpumem::testing_support::unique_temp_path("gzip_helper", ".gz");
  gzFile f = gzopen(path.string().c_str(), "wb");
  EXPECT_NE(f, nullptr);
  EXPECT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
  gzclose(f);
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove(path);
  return bytes;
}

// Reads `text` from a file and expects a trace_error at `line` whose message contains `needle`.
void expect_error(const std::string& text, std::uint64_t line, const std::string& needle) {
  temp_file f(text);
  try {
    (void)gpumem::read_trace(f.path());
    ADD_FAILURE() << "no trace_error; expected one at line " << line << " about `" << needle << "`";
  } catch (const trace_error& e) {
    EXPECT_EQ(e.line(), line) << e.what();
    EXPECT_EQ(e.file(), f.path().string());
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(f.path().string()), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(TraceRead, ParsesEveryField) {
  temp_file f(std::string(header) +
              "7,12:23:15.183957,allocate,0x7fb11a600000,38535168,0x1a\n"
              "7,,allocate failure,0x0,1099511627776,0x0\n"
              "3,23:59:59.999999,free,0x7fb11a600000,38535168,0x2b\n");
  const auto t = gpumem::read_trace(f.path());
  ASSERT_EQ(t.records.size(), 3u);
  EXPECT_EQ(t.name, f.path().string());
  const auto& a = t.records[0];
  EXPECT_EQ(a.thread, 7u);
  EXPECT_EQ(a.time_us, ((12 * 60 + 23) * 60 + 15) * 1000000LL + 183957);
  EXPECT_EQ(a.action, trace_action::allocate);
  EXPECT_EQ(a.pointer, 0x7fb11a600000u);
  EXPECT_EQ(a.size, 38535168u);
  EXPECT_EQ(a.stream, 0x1au);
  EXPECT_EQ(t.records[1].time_us, -1);
  EXPECT_EQ(t.records[1].action, trace_action::allocate_failure);
  EXPECT_EQ(t.records[1].size, 1099511627776u);
  EXPECT_EQ(t.records[2].time_us, 86399999999LL);
  EXPECT_EQ(t.records[2].action, trace_action::free);
  EXPECT_EQ(t.lines, (std::vector<std::uint64_t>{2, 3, 4}));
}

TEST(TraceRead, FractionOfAnyLengthIsMicroseconds) {
  temp_file f(std::string(header) + "0,00:00:01.5,allocate,0x100,1,0x0\n"
                                    "0,00:00:01.123456789,allocate,0x200,1,0x0\n"
                                    "0,00:00:02,allocate,0x300,1,0x0\n");
  const auto t = gpumem::read_trace(f.path());
  EXPECT_EQ(t.records[0].time_us, 1500000);
  EXPECT_EQ(t.records[1].time_us, 1123456);
  EXPECT_EQ(t.records[2].time_us, 2000000);
}

TEST(TraceRead, AcceptsCrlfAndEmptyLinesAtTheEnd) {
  temp_file f("Thread,Time,Action,Pointer,Size,Stream\r\n"
              "0,00:00:00.000001,allocate,0x100,256,0x0\r\n"
              "0,00:00:00.000002,free,0x100,256,0x0\r\n\r\n\n");
  const auto t = gpumem::read_trace(f.path());
  ASSERT_EQ(t.records.size(), 2u);
  EXPECT_EQ(t.records[1].stream, 0u);
  EXPECT_EQ(t.records[1].size, 256u);
}

TEST(TraceRead, AcceptsNoNewlineAtTheEnd) {
  temp_file f(std::string(header) + "0,00:00:00.000001,allocate,0x100,256,0x0");
  EXPECT_EQ(gpumem::read_trace(f.path()).records.size(), 1u);
}

TEST(TraceRead, PointerReusedAfterFreeIsFine) {
  temp_file f(std::string(header) + "0,,allocate,0x100,256,0x0\n0,,free,0x100,256,0x0\n"
                                    "0,,allocate,0x100,512,0x0\n0,,free,0x100,512,0x0\n");
  EXPECT_EQ(gpumem::read_trace(f.path()).records.size(), 4u);
}

TEST(TraceRead, FailureRowsAreKeptButMakeNothingLive) {
  // The failed request's pointer is not live, so allocating it afterwards is not a reuse.
  temp_file f(std::string(header) + "0,,allocate failure,0x100,256,0x0\n"
                                    "0,,allocate,0x100,256,0x0\n");
  const auto t = gpumem::read_trace(f.path());
  ASSERT_EQ(t.records.size(), 2u);
  EXPECT_EQ(t.records[0].action, trace_action::allocate_failure);
  expect_error(std::string(header) + "0,,allocate failure,0x100,256,0x0\n0,,free,0x100,256,0x0\n", 3,
               "never allocated");
}

TEST(TraceRead, ZeroByteRequestsMayReturnNull) {
  temp_file f(std::string(header) + "0,,allocate,0x0,0,0x0\n0,,allocate,0x0,0,0x0\n0,,free,0x0,0,0x0\n");
  EXPECT_EQ(gpumem::read_trace(f.path()).records.size(), 3u);
  expect_error(std::string(header) + "0,,allocate,0x0,64,0x0\n", 2, "null pointer");
}

// ---- the null pointer as RMM's logging adaptor writes it ----
// RMM logs a failed request as `allocate failure` with a null pointer, printed by printf's %p
// (glibc: `(nil)`) in current releases, by %llx (`0`) or by fmt (`0x0`) in earlier ones; the default
// stream is printed through an ostream, which writes `0`.

// Reads `rows` after the header and expects one failed request of `bytes` among them, on stream 0.
void expect_failure_row(const std::string& rows, std::uint64_t bytes) {
  temp_file f(std::string(header) + rows);
  const auto t = gpumem::read_trace(f.path());
  std::size_t failures = 0;
  for (const auto& r : t.records) {
    if (r.action != trace_action::allocate_failure) continue;
    ++failures;
    EXPECT_EQ(r.pointer, 0u);
    EXPECT_EQ(r.size, bytes);
    EXPECT_EQ(r.stream, 0u);
  }
  EXPECT_EQ(failures, 1u);
  const auto report = gpumem::diagnose(t);
  EXPECT_EQ(report.allocate_failures, 1u);
  EXPECT_NE(report.find("alloc-failure"), nullptr);
}

TEST(TraceReadRmmNull, NilFromGlibcPrintf) {
  expect_failure_row("139872,12:23:21.816491,allocate,0x7fb7795f8e00,256,0\n"
                     "139872,12:23:21.816500,allocate failure,(nil),1099511627776,0\n"
                     "139872,12:23:21.816700,free,0x7fb7795f8e00,256,0\n"
                     "139872,12:23:21.816800,allocate,(nil),0,0x55d0c0ffee00\n"
                     "139872,12:23:21.816900,free,(nil),0,0x55d0c0ffee00\n",
                     std::uint64_t{1} << 40);
}

TEST(TraceReadRmmNull, BareZero) {
  expect_failure_row("7,12:00:00.000001,allocate,0x7fb7795f8e00,4096,0\n"
                     "7,12:00:00.000002,allocate failure,0,8589934592,0\n"
                     "7,12:00:00.000003,free,0x7fb7795f8e00,4096,0\n"
                     "7,12:00:00.000004,allocate,0,0,0x55d0c0ffee00\n",
                     std::uint64_t{8} << 30);
}

TEST(TraceReadRmmNull, ZeroXZeroBesideRmmsDefaultStream) {
  // `0x0` alone always read; a row of today's RMM names the default stream `0` beside it.
  expect_failure_row("7,12:00:00.000001,allocate failure,0x0,4096,0\n", 4096);
}

TEST(TraceReadRmmNull, OtherSpellingsStayErrors) {
  for (const char* bad : {"(null)", "nil", "(nil", "NULL", "00", "0x"})
    expect_error(std::string(header) + "0,,allocate failure," + bad + ",4096,0x0\n", 2,
                 std::string("pointer `") + bad + "` is not hex with a 0x prefix");
  expect_error(std::string(header) + "0,,allocate,0x100,256,(nil)x\n", 2, "stream `(nil)x`");
  // A null pointer is still no answer to a request of some bytes.
  expect_error(std::string(header) + "0,,allocate,(nil),64,0\n", 2, "null pointer");
}

// ---- bad input, one class per test ----

TEST(TraceReadErrors, MissingFile) {
  try {
    (void)gpumem::read_trace("/nonexistent/gpumem/trace.csv");
    ADD_FAILURE() << "no error for a missing file";
  } catch (const trace_error& e) {
    EXPECT_EQ(e.line(), 0u);
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
}

TEST(TraceReadErrors, EmptyFile) { expect_error("", 0, "no header"); }

TEST(TraceReadErrors, MissingHeader) {
  expect_error("0,00:00:00.000001,allocate,0x100,256,0x0\n", 1, "missing header");
}

TEST(TraceReadErrors, UnknownColumnIsNamed) {
  expect_error("Thread,Time,Action,Pointer,Size,Stream,Device\n", 1, "unknown column `Device` (column 7)");
  expect_error("Thread,Time,Verb,Pointer,Size,Stream\n", 1, "unknown column `Verb` (column 3)");
}

TEST(TraceReadErrors, ColumnsOutOfOrder) {
  expect_error("Thread,Time,Action,Size,Pointer,Stream\n", 1, "column `Size` is column 4");
}

TEST(TraceReadErrors, ColumnsMissing) {
  expect_error("Thread,Time,Action,Pointer\n", 1, "lacks column(s) `Size,Stream`");
}

TEST(TraceReadErrors, UnknownAction) {
  expect_error(std::string(header) + "0,,allocate,0x100,256,0x0\n0,,release,0x100,256,0x0\n", 3,
               "unknown action `release`");
}

TEST(TraceReadErrors, SizeNotANumber) {
  expect_error(std::string(header) + "0,,allocate,0x100,25x6,0x0\n", 2, "size `25x6`");
  expect_error(std::string(header) + "0,,allocate,0x100,-4,0x0\n", 2, "size `-4`");
  expect_error(std::string(header) + "0,,allocate,0x100,,0x0\n", 2, "size ``");
  expect_error(std::string(header) + "0,,allocate,0x100,99999999999999999999999,0x0\n", 2,
               "too large");
}

TEST(TraceReadErrors, PointerNotHex) {
  expect_error(std::string(header) + "0,,allocate,7fb11a600000,256,0x0\n", 2, "pointer `7fb11a600000`");
  expect_error(std::string(header) + "0,,allocate,0xZZ,256,0x0\n", 2, "pointer `0xZZ`");
  expect_error(std::string(header) + "0,,allocate,0x100,256,stream1\n", 2, "stream `stream1`");
}

TEST(TraceReadErrors, BadTime) {
  expect_error(std::string(header) + "0,12:3:15.1,allocate,0x100,256,0x0\n", 2, "time `12:3:15.1`");
  expect_error(std::string(header) + "0,25:00:00.0,allocate,0x100,256,0x0\n", 2, "out of range");
  expect_error(std::string(header) + "0,12:00:00.,allocate,0x100,256,0x0\n", 2, "fraction");
}

TEST(TraceReadErrors, TruncatedLine) {
  expect_error(std::string(header) + "0,,allocate,0x100,256,0x0\n0,,free,0x100\n", 3,
               "truncated line: 4 field(s), expected 6");
}

TEST(TraceReadErrors, TooManyFields) {
  expect_error(std::string(header) + "0,,allocate,0x100,256,0x0,extra\n", 2, "too many fields");
}

TEST(TraceReadErrors, BinaryGarbage) {
  std::string garbage = std::string(header) + "0,,allocate,0x100,256,0x0\n";
  garbage += std::string("\x89PNG\x00\x01\xff,x,y", 12) + "\n";
  expect_error(garbage, 3, "binary data");
  expect_error(std::string("\x7f" "ELF\x02\x01\x01\x00", 8), 1, "binary data");
}

TEST(TraceReadErrors, LineOverOneMiB) {
  expect_error(std::string(header) + "0,,allocate,0x100," + std::string(std::size_t{2} << 20, '1') +
                   ",0x0\n",
               2, "longer than");
  // No newline at all: a single huge line is still cut off at the limit, not read into a field.
  expect_error(std::string(header) + std::string(std::size_t{3} << 20, 'a'), 2, "longer than");
}

TEST(TraceReadErrors, EmptyLineInTheMiddle) {
  expect_error(std::string(header) + "0,,allocate,0x100,256,0x0\n\n0,,free,0x100,256,0x0\n", 3,
               "empty line inside");
}

TEST(TraceReadErrors, FreeOfPointerNeverAllocated) {
  expect_error(std::string(header) + "0,,allocate,0x100,256,0x0\n0,,free,0x200,256,0x0\n", 3,
               "free of 0x200, which was never allocated");
}

TEST(TraceReadErrors, DoubleFree) {
  expect_error(std::string(header) + "0,,allocate,0x100,256,0x0\n0,,free,0x100,256,0x0\n"
                                     "0,,free,0x100,256,0x0\n",
               4, "not live (already freed at line 3)");
}

TEST(TraceReadErrors, AllocateOfLivePointer) {
  expect_error(std::string(header) + "0,,allocate,0x100,256,0x0\n0,,allocate,0x100,512,0x0\n", 3,
               "0x100, which is still live (allocated at line 2");
}

TEST(TraceReadErrors, FreeSizeMismatch) {
  expect_error(std::string(header) + "0,,allocate,0x100,256,0x0\n0,,free,0x100,512,0x0\n", 3,
               "names 512 bytes, but it was allocated with 256 bytes at line 2");
}

TEST(TraceReadErrors, CorruptGzip) {
  std::string z = gzip(std::string(header) + "0,,allocate,0x100,256,0x0\n");
  expect_error(z.substr(0, z.size() / 2), 0, "cut short");
  std::string bad = z;
  bad[12] = static_cast<char>(bad[12] ^ 0x55);
  bad[13] = static_cast<char>(bad[13] ^ 0x55);
  expect_error(bad, 0, "gzip");
}

// ---- writing, and round trips ----

TEST(TraceWrite, RoundTripPlainAndGzip) {
  std::vector<gpumem::trace_record> rs = {
      {0, 44595183957, trace_action::allocate, 0x7fb11a600000, 38535168, 0x0},
      {139872, -1, trace_action::allocate_failure, 0x0, std::uint64_t{1} << 40, 0x55d0c0ffee00},
      {1, 1, trace_action::allocate, 0x7fb779486e00, 512, 0x7},
      {0, 44595184103, trace_action::free, 0x7fb11a600000, 38535168, 0x3},
      {2, 86399999999, trace_action::free, 0x7fb779486e00, 512, 0x7},
  };
  std::ostringstream out;
  gpumem::write_trace_header(out);
  for (const auto& r : rs) gpumem::write_trace_record(out, r);
  EXPECT_NE(out.str().find("0,12:23:15.183957,allocate,0x7fb11a600000,38535168,0x0\n"),
            std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("139872,,allocate failure,0x0,1099511627776,0x55d0c0ffee00\n"),
            std::string::npos)
      << out.str();

  for (bool compressed : {false, true}) {
    // A name without .gz for the compressed one: the magic bytes decide, not the extension.
    temp_file f(compressed ? gzip(out.str()) : out.str(), ".csv");
    const auto t = gpumem::read_trace(f.path());
    ASSERT_EQ(t.records.size(), rs.size()) << "compressed=" << compressed;
    for (std::size_t i = 0; i < rs.size(); ++i) {
      EXPECT_EQ(t.records[i].thread, rs[i].thread);
      EXPECT_EQ(t.records[i].time_us, rs[i].time_us);
      EXPECT_EQ(t.records[i].action, rs[i].action);
      EXPECT_EQ(t.records[i].pointer, rs[i].pointer);
      EXPECT_EQ(t.records[i].size, rs[i].size);
      EXPECT_EQ(t.records[i].stream, rs[i].stream);
    }
  }
}

TEST(TraceWrite, ParseFromStreamMatchesFile) {
  const std::string text = std::string(header) + "0,00:00:01.000000,allocate,0x100,256,0x0\n";
  std::istringstream plain(text);
  EXPECT_EQ(gpumem::parse_trace(plain, "plain").records.size(), 1u);
  std::istringstream packed(gzip(text));
  const auto t = gpumem::parse_trace(packed, "packed");
  ASSERT_EQ(t.records.size(), 1u);
  EXPECT_EQ(t.records[0].time_us, 1000000);
  std::istringstream bad(std::string(header) + "0,,allocate,0x100,abc,0x0\n");
  try {
    (void)gpumem::parse_trace(bad, "in-memory");
    ADD_FAILURE() << "no error";
  } catch (const trace_error& e) {
    EXPECT_EQ(e.file(), "in-memory");
    EXPECT_EQ(e.line(), 2u);
  }
}

TEST(TraceWrite, ActionNames) {
  EXPECT_STREQ(gpumem::to_string(trace_action::allocate), "allocate");
  EXPECT_STREQ(gpumem::to_string(trace_action::free), "free");
  EXPECT_STREQ(gpumem::to_string(trace_action::allocate_failure), "allocate failure");
}

// ---- the real traces ----

class SharedTraces : public ::testing::TestWithParam<std::pair<const char*, std::size_t>> {};

TEST_P(SharedTraces, ReadCompletely) {
  const fs::path dir = GPUMEM_SHARED_TRACES;
  if (!fs::is_directory(dir)) GTEST_SKIP() << "shared traces folder " << dir << " is not there";
  const auto [file, rows] = GetParam();
  const auto start = std::chrono::steady_clock::now();
  const auto t = gpumem::read_trace(dir / file);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(t.records.size(), rows);
  EXPECT_EQ(t.lines.size(), rows);
  EXPECT_EQ(t.lines.back(), rows + 1);  // one header line, no gaps
  std::size_t allocs = 0, frees = 0;
  for (const auto& r : t.records) {
    allocs += r.action == trace_action::allocate;
    frees += r.action == trace_action::free;
    ASSERT_GE(r.time_us, 0);
  }
  EXPECT_EQ(allocs + frees, rows);  // these traces hold no failures
  EXPECT_GE(allocs, frees);
  // Generous even for sanitizer or debug builds; a release build reads llama_serve far faster.
  EXPECT_LT(seconds, 10.0) << file;
  std::printf("[   info   ] %s: %zu rows in %.3f s\n", file, t.records.size(), seconds);
}

INSTANTIATE_TEST_SUITE_P(Real, SharedTraces,
                         ::testing::Values(std::make_pair("resnet50_train.csv.gz", std::size_t{33632}),
                                           std::make_pair("bert_infer_varlen.csv.gz", std::size_t{28896}),
                                           std::make_pair("llama_serve.csv.gz", std::size_t{635696})),
                         [](const auto& info) {
                           std::string n = info.param.first;
                           return n.substr(0, n.find('.'));
                         });

// ---- the bundled examples (regenerated by examples/make_examples.py) ----

TEST(ExampleTraces, ReadWithTheirDocumentedRowCounts) {
  const fs::path dir = GPUMEM_EXAMPLES;
  EXPECT_EQ(gpumem::read_trace(dir / "small_training.csv").records.size(), 1188u);
  EXPECT_EQ(gpumem::read_trace(dir / "varlen_inference.csv").records.size(), 2640u);
  EXPECT_EQ(gpumem::read_trace(dir / "pitfalls.csv").records.size(), 2433u);
}
