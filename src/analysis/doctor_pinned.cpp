// The pinned-memory finding: how close a job's page-locked host memory comes to the cap
// pinned_host_resource enforces, and whether it pins and unpins per batch instead of keeping its
// buffers.
#include "doctor_pinned.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "doctor_words.hpp"
#include "pinned_profile.hpp"
#include "gpumem/host_memory.hpp"

namespace gpumem::detail {
namespace {

std::string cap_text(std::uint64_t cap, bool is_default) {
  return is_default ? fmt::format("{} cap (the default: 20% of this machine's RAM)", bytes_text(double(cap)))
                    : fmt::format("{} cap", bytes_text(double(cap)));
}

}  // namespace

void pinned_memory(const doctor_options& opts, doctor_report& out) {
  if (!opts.pinned) {
    out.skipped.push_back("pinned-memory: no pinned trace given (--pinned)");
    return;
  }
  const bool default_cap = opts.pinned_cap_bytes == 0;
  const std::uint64_t cap = default_cap ? default_pinned_cap_bytes() : opts.pinned_cap_bytes;
  if (cap == 0) {
    out.skipped.push_back("pinned-memory: no cap to judge against: this machine's RAM is unknown "
                          "(sysconf) and no cap was given (--pinned-cap)");
    return;
  }
  const pinned_profile p = profile_pinned(*opts.pinned);
  if (p.allocations == 0 && p.failures == 0) {
    out.skipped.push_back("pinned-memory: the pinned trace allocates nothing");
    return;
  }
  const auto& th = opts.thresholds;
  const double of_cap = static_cast<double>(p.peak_bytes) / static_cast<double>(cap);
  const double repin_share = share(p.repinned_allocations, p.allocations);

  finding f;
  f.id = "pinned-memory";
  f.figures = {count("peak_pinned_bytes", p.peak_bytes), count("pinned_cap_bytes", cap),
               ratio("peak_share_of_cap", of_cap), count("peak_pinned_line", p.peak_line),
               count("pinned_allocations", p.allocations)};
  std::string rate;
  if (p.timed && p.duration_seconds > 0.0) {
    const double per_second = static_cast<double>(p.allocations) / p.duration_seconds;
    f.figures.push_back(ratio("pinned_allocations_per_second", per_second));
    rate = fmt::format("{:.1f} per second", per_second);
  } else {
    // No times (or one instant): a rate per rows of the pinned trace instead.
    const double per_1000 = 1000.0 * share(p.allocations, p.rows);
    f.figures.push_back(ratio("pinned_allocations_per_1000_ops", per_1000));
    rate = fmt::format("{:.0f} per 1000 ops", per_1000);
  }
  f.figures.push_back(count("largest_pinned_allocation_bytes", p.largest_allocation_bytes));
  f.figures.push_back(count("repinned_allocations", p.repinned_allocations));
  f.figures.push_back(ratio("repinned_share", repin_share));
  f.figures.push_back(count("pinned_failed_requests", p.failures));

  // Cost: over the cap (or refused) the job fails; else the re-pins' time against the pinned
  // trace's own time, and at least a warning's share this close to the cap.
  const bool over = p.peak_bytes > cap || p.failures > 0;
  const bool near = of_cap >= th.pinned_cap_share_warning;
  f.cost_seconds = static_cast<double>(p.repinned_allocations) * th.repin_us * 1e-6;
  const double pinned_seconds = std::max(th.min_job_seconds, p.timed && p.duration_seconds > 0.0
                                                                 ? p.duration_seconds
                                                                 : static_cast<double>(p.rows) * th.untimed_us_per_row * 1e-6);
  const double repin_time_share = pinned_seconds > 0 ? f.cost_seconds / pinned_seconds : 0.0;
  f.figures.push_back(ratio("repin_seconds", f.cost_seconds));
  f.figures.push_back(ratio("repin_time_share", repin_time_share));
  f.cost_share = over ? 1.0 : std::min(1.0, std::max(repin_time_share, near ? th.cost_warning : 0.0));
  const bool churn = severity_for_cost(repin_time_share, th) > severity::info;

  f.summary = fmt::format("peak pinned {} (line {}) is {:.1f}% of the {}; {} pinned allocations ({}), "
                          "the largest {}; ", bytes_text(double(p.peak_bytes)), p.peak_line, 100 * of_cap,
                          cap_text(cap, default_cap), p.allocations, rate,
                          bytes_text(double(p.largest_allocation_bytes)));
  f.summary += p.repinned_allocations == 0
                   ? std::string("none re-pins the size of a pinned block freed before")
                   : fmt::format("{} ({:.1f}%) re-pin the size of a pinned block freed before",
                                 p.repinned_allocations, 100 * repin_share);
  if (p.failures > 0) f.summary += fmt::format("; {} pinned requests were refused", p.failures);

  // Advice for each problem seen, the most urgent first.
  std::string advice;
  auto add = [&advice](const char* text) { advice += advice.empty() ? text : std::string(" ") + text; };
  if (over)
    add("Pinned pages are page-locked RAM the OS cannot swap: past the cap pinned_host_resource "
        "refuses, and a host that pins this much swaps or OOM-kills. Pin less at once (smaller or "
        "fewer staging buffers, a bounded ring of them), or raise the cap knowingly on a host with "
        "RAM to spare.");
  else if (near)
    add("Pinned memory comes within 20% of the cap: a larger batch or one more loader worker hits "
        "it. Bound the pinned buffers (a fixed ring of staging buffers) before it does.");
  if (churn)
    add("cudaMallocHost and cudaFreeHost cost about a millisecond each and synchronize the device, "
        "so pinning a buffer per batch stalls every batch: pin one staging buffer of the largest "
        "size once and reuse it (a few in a ring to overlap copies).");
  if (advice.empty())
    add("Pinned usage stays well under the cap and buffers are kept rather than re-pinned: nothing "
        "to do.");
  f.advice = std::move(advice);
  out.findings.push_back(std::move(f));
}

}  // namespace gpumem::detail
