// libFuzzer target: the trace parser on arbitrary bytes must either succeed or throw trace_error —
// never crash, hang, or throw anything else.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "gpumem/trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    const gpumem::trace t = gpumem::parse_trace(in, "fuzz.csv");
    if (t.records.size() != t.lines.size()) std::abort();
    // What was read writes back and reads again to the same records.
    std::ostringstream out;
    gpumem::write_trace_header(out);
    for (const auto& r : t.records) gpumem::write_trace_record(out, r);
    std::istringstream again(out.str());
    const gpumem::trace t2 = gpumem::parse_trace(again, "fuzz2.csv");
    if (t2.records.size() != t.records.size()) std::abort();
  } catch (const gpumem::trace_error&) {
  }
  return 0;
}
