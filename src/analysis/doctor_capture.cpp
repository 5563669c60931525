// capture-frees-graph-memory: a block allocated before a CUDA graph capture and freed on the
// capturing stream while it captures. The graph's kernels captured before the free use the block
// on every replay, but the free hands it back when the capture ends, so other work may get memory
// the graph still writes: the graph form of freeing before the stream is done.
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "doctor_capture.hpp"
#include "doctor_words.hpp"

namespace gpumem::detail {

void capture_frees(const trace& t, doctor_report& out) {
  if (t.captures.empty()) return;
  // For each record index, the allocation index of the block a free names.
  std::unordered_map<std::uint64_t, std::size_t> allocated_at;
  std::vector<std::size_t> alloc_of(t.records.size(), SIZE_MAX);
  for (std::size_t i = 0; i < t.records.size(); ++i) {
    const trace_record& r = t.records[i];
    if (r.action == trace_action::allocate && r.pointer) {
      allocated_at[r.pointer] = i;
    } else if (r.action == trace_action::free && r.pointer) {
      if (auto it = allocated_at.find(r.pointer); it != allocated_at.end()) {
        alloc_of[i] = it->second;
        allocated_at.erase(it);
      }
    }
  }
  std::uint64_t frees = 0, bytes = 0, captures = 0, first_line = 0;
  for (const trace_capture& c : t.captures) {
    bool hit = false;
    const std::size_t end = std::min(c.last, t.records.size());
    for (std::size_t i = c.first; i < end; ++i) {
      const trace_record& r = t.records[i];
      if (r.action != trace_action::free || r.stream != c.stream || alloc_of[i] >= c.first) continue;
      ++frees;
      bytes += r.size;
      if (!first_line || t.lines[i] < first_line) first_line = t.lines[i];
      hit = true;
    }
    captures += hit;
  }
  if (!frees) return;
  finding f;
  f.id = "capture-frees-graph-memory";
  f.cost_share = 1.0;  // replays may read and write memory handed to other work: wrong results
  f.cost_bytes = static_cast<double>(bytes);
  f.figures = {count("frees_during_capture", frees), count("freed_bytes", bytes), count("captures", captures),
               count("first_free_line", first_line)};
  f.summary = fmt::format("{} block(s) ({}) allocated before a CUDA graph capture were freed on the capturing stream "
                          "during it (first at line {}): the graph's replays still use them",
                          frees, bytes_text(static_cast<double>(bytes)), first_line);
  f.advice = "Keep what a graph reads or writes alive while the graph exists (PyTorch: the graph's static "
             "inputs and outputs), or allocate it inside the capture so it comes from the graph's pool. Freed "
             "during the capture, the block goes back to the allocator when the capture ends and other work "
             "may get it while replays still write there.";
  out.findings.push_back(std::move(f));
}

}  // namespace gpumem::detail
