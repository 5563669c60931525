// The step plan: a step found when its first requests come again, laid out without overlaps, then
// followed — and never trusted: an occupied place is a miss, a plan that keeps missing drops and
// drains, a block freed on another stream keeps its place until the region goes back. Then the
// pool with it: a job that repeats itself stops mapping memory after its first steps, within the
// reserve ceiling, and every invariant holds on the way.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "gpumem/pool.hpp"
#include "gpumem/replay.hpp"
#include "gpumem/trace.hpp"
#include "gpumem/sim_device.hpp"
#include "step_plan.hpp"

namespace {

using namespace gpumem;
using detail::step_plan;
constexpr std::size_t MiB = std::size_t{1} << 20;

// One step of a made-up training job: a forward pass that keeps activations, a backward pass that
// frees them in reverse with a temporary beside each. `ops`: +size allocates, -k frees the k-th
// allocation of the step (1-based).
std::vector<long> training_step(int layers) {
  std::vector<long> ops;
  int n = 0;
  std::vector<int> acts;
  for (int l = 0; l < layers; ++l) {
    ops.push_back(static_cast<long>((2 + l % 3) * MiB));  // activation
    acts.push_back(++n);
    ops.push_back(static_cast<long>(3 * MiB / 2));  // workspace
    ops.push_back(-(++n));
  }
  for (int l = layers; l-- > 0;) {
    ops.push_back(static_cast<long>((4 + l % 2) * MiB));  // gradient temporary
    const int g = ++n;
    ops.push_back(-acts[l]);
    ops.push_back(-g);
  }
  return ops;
}

// Runs `ops` once on `rec` as a pool would report them, addresses from a bump counter.
void record_step(step_plan& plan, const std::vector<long>& ops, std::uintptr_t& next_addr) {
  std::vector<std::uintptr_t> addr;
  for (long op : ops) {
    if (op > 0) {
      addr.push_back(next_addr);
      plan.record_alloc(next_addr, static_cast<std::size_t>(op), 256, stream_ref{});
      next_addr += static_cast<std::size_t>(op);
    } else {
      plan.record_free(addr[static_cast<std::size_t>(-op - 1)]);
    }
  }
}

// `step` recorded twice, laid out and installed at once (the region at 2^40).
void follow_two_steps_of(step_plan& plan, const std::vector<long>& step) {
  std::uintptr_t bump = 1 << 30;
  record_step(plan, step, bump);
  record_step(plan, step, bump);
  ASSERT_TRUE(plan.step_ready());
  std::size_t peak = 0;
  ASSERT_GT(plan.lay_out(peak), 0u);
  plan.install(std::uintptr_t{1} << 40);
}

// A step found again after the recording started over (ticks further on) hashes as it did, so the
// pool need not lay out again a step whose layout did not fit; another step hashes otherwise.
TEST(StepPlan, TheSameStepFoundAgainHasTheSameSignature) {
  auto signature_of = [](const std::vector<long>& step, int skip_steps) {
    step_plan plan;
    std::uintptr_t bump = 1 << 30;
    for (int k = 0; k < skip_steps; ++k) {
      record_step(plan, training_step(3), bump);  // too short for a step: ticks pass
      plan.restart();
    }
    record_step(plan, step, bump);
    record_step(plan, step, bump);
    EXPECT_TRUE(plan.step_ready());
    return plan.step_signature();
  };
  const std::uint64_t first = signature_of(training_step(24), 0);
  EXPECT_EQ(signature_of(training_step(24), 3), first);
  EXPECT_NE(signature_of(training_step(25), 0), first);
}

TEST(StepPlan, FindsTheStepLaysItOutAndFollowsIt) {
  step_plan plan;
  const auto step = training_step(24);
  std::uintptr_t bump = 1 << 30;
  record_step(plan, step, bump);
  EXPECT_FALSE(plan.step_ready()) << "one step alone is no repeat";
  // The next step's first requests: the step is found once match_len of them came again.
  std::size_t allocs = 0;
  std::vector<std::uintptr_t> next;
  for (long op : step) {
    if (op <= 0) continue;
    next.push_back(bump);
    plan.record_alloc(bump, static_cast<std::size_t>(op), 256, stream_ref{});
    bump += static_cast<std::size_t>(op);
    if (++allocs == step_plan::match_len) break;
  }
  ASSERT_TRUE(plan.step_ready());
  std::size_t peak = 0;
  const std::size_t extent = plan.lay_out(peak);
  ASSERT_GT(peak, 0u);
  EXPECT_GE(extent, peak);
  EXPECT_LE(static_cast<double>(extent), 1.03 * static_cast<double>(peak)) << "a stack-shaped step packs tightly";
  EXPECT_EQ(plan.state(), step_plan::phase::laid_out);
  // The rest of the second step goes to the arena; the region is taken where the next one starts
  // (nothing of the step is live there).
  for (std::size_t k = allocs; k < plan.entries(); ++k) {
    EXPECT_FALSE(plan.install_due()) << k;
    plan.count_alloc();
  }
  ASSERT_TRUE(plan.install_due());
  constexpr std::uintptr_t base = std::uintptr_t{1} << 40;
  plan.install(base);
  EXPECT_TRUE(plan.following());
  // Two more steps, placed by the plan: every one of their requests lands in the region with no
  // overlap, none misses, and the live set empties at each step's end.
  for (int round = 0; round < 2; ++round) {
    std::vector<std::uintptr_t> got;
    std::size_t k = 0;
    for (long op : step) {
      if (op > 0) {
        const std::uintptr_t a = plan.place(static_cast<std::size_t>(op), 256, stream_ref{});
        ASSERT_NE(a, 0u) << "request " << k << " of round " << round;
        EXPECT_TRUE(plan.in_region(a) && plan.in_region(a + static_cast<std::size_t>(op) - 1));
        got.push_back(a);
        ++k;
        plan.check();
      } else {
        EXPECT_FALSE(plan.release(got[static_cast<std::size_t>(-op - 1)], stream_ref{}));
      }
    }
    EXPECT_EQ(plan.live_blocks(), 0u);
  }
  EXPECT_EQ(plan.misses(), 0u);
}

// A step laid out and waiting for its start lets a kept stretch be followed meanwhile: the step is
// set aside, the stretch's requests count as the step's, and once the stretch's region goes back
// (or could not be taken) the step waits again, due where it would have been without the stretch.
TEST(StepPlan, AStepLaidOutWaitsThroughAStretchFollowedOnce) {
  step_plan plan;
  const auto step = training_step(24);
  std::uintptr_t bump = 1 << 30;
  record_step(plan, step, bump);
  std::size_t allocs = 0;
  for (long op : step) {
    if (op <= 0) continue;
    plan.record_alloc(bump, static_cast<std::size_t>(op), 256, stream_ref{});
    bump += static_cast<std::size_t>(op);
    if (++allocs == step_plan::match_len) break;
  }
  ASSERT_TRUE(plan.step_ready());
  std::size_t peak = 0;
  ASSERT_GT(plan.lay_out(peak), 0u);
  const std::size_t entries = plan.entries(), due_in = plan.requests_to_install();
  ASSERT_GT(due_in, 3u);
  const std::vector<step_plan::entry> stretch = {
      {4 * MiB, 8, stream_ref{}, 0}, {4 * MiB, 8, stream_ref{}, 4 * MiB}, {4 * MiB, 8, stream_ref{}, 8 * MiB}};
  // Its region not taken: the step is laid out as it was.
  plan.follow_once(stretch, stream_ref{});
  plan.unfollow();
  EXPECT_EQ(plan.state(), step_plan::phase::laid_out);
  EXPECT_EQ(plan.entries(), entries);
  EXPECT_EQ(plan.requests_to_install(), due_in);
  // Taken and followed to its end.
  plan.follow_once(stretch, stream_ref{});
  EXPECT_EQ(plan.entries(), stretch.size());
  constexpr std::uintptr_t base = std::uintptr_t{1} << 40;
  plan.install(base);
  ASSERT_TRUE(plan.following_once());
  for (std::size_t k = 0; k < stretch.size(); ++k) {
    const std::uintptr_t a = plan.place(4 * MiB, 256, stream_ref{});
    EXPECT_EQ(a, base + k * 4 * MiB);
    EXPECT_EQ(plan.release(a, stream_ref{}), k + 1 == stretch.size()) << "drained after its last block";
  }
  plan.region_returned();
  EXPECT_FALSE(plan.following_once());
  EXPECT_EQ(plan.state(), step_plan::phase::laid_out) << "the step waits again";
  EXPECT_EQ(plan.entries(), entries);
  EXPECT_EQ(plan.requests_to_install(), due_in - stretch.size()) << "the stretch's requests were the step's";
}

TEST(StepPlan, ATakenPlaceIsAMissAndAPlanThatKeepsMissingDrains) {
  step_plan plan;
  ASSERT_NO_FATAL_FAILURE(follow_two_steps_of(plan, training_step(24)));
  // The plan expects step request match_len (the next round's earlier ones went to the arena).
  // A block it places stays live; asking again for the requests that follow eventually wants its
  // place (the step reuses memory), which is then a miss, never an overlap.
  std::vector<std::uintptr_t> held;
  for (int i = 0; i < 400 && plan.following(); ++i) {
    const std::size_t size = static_cast<std::size_t>((2 + i % 3) * MiB);
    if (const std::uintptr_t a = plan.place(size, 256, stream_ref{})) held.push_back(a);
    plan.check();
  }
  EXPECT_FALSE(plan.following()) << "requests that do not fit the plan make it drop";
  EXPECT_GT(plan.misses(), 0u);
  EXPECT_EQ(plan.state(), step_plan::phase::draining);
  EXPECT_EQ(plan.place(2 * MiB, 256, stream_ref{}), 0u) << "a draining plan places nothing";
  for (std::size_t i = 0; i < held.size(); ++i) {
    const bool last = i + 1 == held.size();
    EXPECT_EQ(plan.release(held[i], stream_ref{}), last);
  }
  EXPECT_TRUE(plan.drained());
  plan.region_returned();
  EXPECT_EQ(plan.state(), step_plan::phase::recording);
}

TEST(StepPlan, ARequestThePlanDidNotExpectTakesAFreePlaceInTheRegion) {
  step_plan plan;
  ASSERT_NO_FATAL_FAILURE(follow_two_steps_of(plan, training_step(24)));
  // A size the step never asked for, on the plan's stream (a loop that ran longer than when the
  // step was recorded): a miss, placed where no planned block is live, inside the region.
  const std::uintptr_t odd = plan.place(3 * MiB + 256, 256, stream_ref{});
  ASSERT_NE(odd, 0u);
  EXPECT_TRUE(plan.in_region(odd) && plan.in_region(odd + 3 * MiB + 255));
  EXPECT_EQ(plan.misses(), 1u);
  EXPECT_EQ(plan.hits(), 0u);
  plan.check();
  // The expected requests go on around it: each is placed (at its own place, or missing the one
  // the odd block holds and taking a free one) and none overlaps it (check()).
  std::vector<std::uintptr_t> got;
  for (int i = 0; i < 6; ++i) {
    const std::size_t size = i % 2 ? 3 * MiB / 2 : static_cast<std::size_t>((2 + (8 + i / 2) % 3) * MiB);
    const std::uintptr_t a = plan.place(size, 256, stream_ref{});
    if (a) got.push_back(a);
    plan.check();
  }
  EXPECT_GT(plan.hits(), 0u);
  // A request on another stream is never put in a gap: the region's memory passes between blocks
  // without events only on the plan's stream.
  EXPECT_EQ(plan.place(7 * MiB + 512, 256, stream_ref{9}), 0u);
  // Nor one larger than any free place.
  EXPECT_EQ(plan.place(std::size_t{1} << 40, 256, stream_ref{}), 0u);
  EXPECT_FALSE(plan.release(odd, stream_ref{}));
  for (std::uintptr_t a : got) plan.release(a, stream_ref{});
  EXPECT_EQ(plan.live_blocks(), 0u);
  plan.check();
}

TEST(StepPlan, ABlockFreedOnAnotherStreamKeepsItsPlaceUntilTheRegionGoesBack) {
  step_plan plan;
  ASSERT_NO_FATAL_FAILURE(follow_two_steps_of(plan, training_step(24)));
  const std::uintptr_t a = plan.place(2 * MiB, 256, stream_ref{});  // request 16: layer 8's activation
  ASSERT_NE(a, 0u);
  EXPECT_TRUE(plan.release(a, stream_ref{7})) << "the only block: the plan drains at once";
  EXPECT_EQ(plan.live_blocks(), 1u) << "its place stays taken";
  ASSERT_EQ(plan.other_streams().size(), 1u);
  EXPECT_EQ(plan.other_streams()[0], stream_ref{7});
  plan.check();
}

TEST(StepPlan, ShortRepeatsAreNoStep) {
  step_plan plan;
  std::uintptr_t bump = 1 << 30;
  // A pair pattern: the same size allocated and freed, over and over.
  for (int i = 0; i < 5000; ++i) {
    plan.record_alloc(bump, 8 * MiB, 256, stream_ref{});
    plan.record_free(bump);
    bump += 8 * MiB;
    if (plan.step_ready()) break;
  }
  ASSERT_TRUE(plan.step_ready());
  std::size_t peak = 0;
  EXPECT_EQ(plan.lay_out(peak), 8 * MiB);
  EXPECT_GE(plan.entries(), step_plan::min_step) << "a step is never shorter than min_step requests";
}

// --- The pool with its plan. ---------------------------------------------------------------------

sim_options device() {
  sim_options so;
  so.capacity_bytes = std::size_t{4} << 30;
  so.virtual_memory = true;
  return so;
}

// Runs `steps` steps of `ops` on `p`; returns the stats after each.
std::vector<pool_stats> run_steps(pool& p, const std::vector<long>& ops, int steps) {
  std::vector<pool_stats> after;
  for (int s = 0; s < steps; ++s) {
    std::vector<std::pair<void*, std::size_t>> got;
    for (long op : ops) {
      if (op > 0) {
        got.emplace_back(p.allocate(static_cast<std::size_t>(op)), static_cast<std::size_t>(op));
      } else {
        auto& [ptr, bytes] = got[static_cast<std::size_t>(-op - 1)];
        p.deallocate(ptr, bytes);
      }
    }
    p.check_invariants();
    after.push_back(p.stats());
  }
  return after;
}

// A step that best fit cannot place without moving memory at a tight reserve: in each group three
// blocks of x side by side, the outer two freed, then one of 2x — which fits only where the middle
// one is not, so the arena moves the freed granules next to each other (or grows). Placed with the
// step known, the middle block goes to one end and the large one over the other two: no move.
std::vector<long> fragmenting_step() {
  std::vector<long> ops;
  int n = 0;
  for (int g = 0; g < 24; ++g) {
    const long x = static_cast<long>((2 + 2 * (g % 4)) * MiB);
    const int a = (ops.push_back(x), ++n), b = (ops.push_back(x), ++n), c = (ops.push_back(x), ++n);
    ops.push_back(-a);
    ops.push_back(-c);
    const int d = (ops.push_back(2 * x), ++n);
    ops.push_back(-b);
    ops.push_back(-d);
  }
  return ops;
}

TEST(PoolStepPlan, AJobThatRepeatsItselfStopsMovingMemory) {
  sim_device dev(device());
  pool p(dev.memory(), dev.streams());
  const auto after = run_steps(p, fragmenting_step(), 6);
  ASSERT_GT(after[1].maps + after[1].unmaps, after[0].maps + after[0].unmaps) << "the case the plan is for";
  EXPECT_EQ(after.back().plans, 1u) << "the step was found and laid out once";
  for (int s = 4; s < 6; ++s) {
    EXPECT_EQ(after[s].maps + after[s].unmaps, after[s - 1].maps + after[s - 1].unmaps) << "step " << s;
    EXPECT_EQ(after[s].plan_hits - after[s - 1].plan_hits, 24u * 4) << "step " << s;
  }
  EXPECT_LE(after.back().fragmentation(), 1.03);
}

// Shared trace `name` replayed `passes` times with the default; nothing when the shared folder
// does not have it.
std::optional<replay_result> replayed_shared(const char* name, std::size_t passes) {
  const std::filesystem::path path = std::filesystem::path(GPUMEM_SHARED_TRACES) / name;
  if (!std::filesystem::exists(path)) return std::nullopt;
  replay_options o;
  o.passes = passes;
  return replay(read_trace(path), o);
}

// The shared ResNet-50 trace, four passes with the default: the plan is found and taken, and the
// warm passes map and unmap nothing, within the reserve ceiling.
TEST(PoolStepPlan, ResNetsWarmPassesMapNothing) {
  const std::optional<replay_result> got = replayed_shared("resnet50_train.csv.gz", 4);
  if (!got) GTEST_SKIP() << "no shared trace resnet50_train.csv.gz in " << GPUMEM_SHARED_TRACES;
  const replay_result& r = *got;
  ASSERT_EQ(r.pass_log.size(), 4u);
  EXPECT_GE(r.stats.plans, 1u);
  EXPECT_GT(r.stats.plan_hits, 0u);
  EXPECT_EQ(r.pass_log[3].driver_granules, r.pass_log[2].driver_granules) << "the last pass maps nothing";
  EXPECT_LE(r.fragmentation, 1.03);
  EXPECT_EQ(r.failed_allocs, 0u);
}

// The shared Llama serving trace: its batches are kept as stretches in the first pass and followed
// from the second, while its step (a whole pass of requests, decode loops inside) waits laid out;
// the step is taken up at its start in the third, and from then on a pass maps at most 1 % of the
// peak's granules, within the reserve ceiling. No warm pass maps a tenth of them.
TEST(PoolStepPlan, LlamasWarmPassesMapAlmostNothing) {
  const std::optional<replay_result> got = replayed_shared("llama_serve.csv.gz", 5);
  if (!got) GTEST_SKIP() << "no shared trace llama_serve.csv.gz in " << GPUMEM_SHARED_TRACES;
  const replay_result& r = *got;
  ASSERT_EQ(r.pass_log.size(), 5u);
  EXPECT_GE(r.stats.plans, 1u);
  const double peak_granules = static_cast<double>(r.stats.peak_live_bytes) / double(2 * MiB);
  for (std::size_t p = 1; p < 5; ++p) {
    const double moved = static_cast<double>(r.pass_log[p].driver_granules - r.pass_log[p - 1].driver_granules);
    EXPECT_LE(moved, (p >= 3 ? 0.01 : 0.1) * peak_granules) << "pass " << p + 1;
  }
  EXPECT_LE(r.fragmentation, 1.03);
  EXPECT_EQ(r.failed_allocs, 0u);
}

TEST(PoolStepPlan, AStepThatCannotSitStillWithinTheCeilingKeepsMoving) {
  sim_device dev(device());
  pool p(dev.memory(), dev.streams());
  // Random lifetimes and sizes: no layout of the step fits within 1.03 of its peak.
  std::vector<long> ops;
  std::mt19937 rng(11);
  std::vector<int> live;
  int n = 0;
  for (int i = 0; i < 800; ++i) {
    if (live.empty() || (live.size() < 40 && rng() % 3)) {
      ops.push_back(static_cast<long>((1 + rng() % 48) * MiB + (rng() % 8) * 4096));
      live.push_back(++n);
    } else {
      const std::size_t k = rng() % live.size();
      ops.push_back(-live[k]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  for (int k : live) ops.push_back(-k);
  const auto after = run_steps(p, ops, 5);
  EXPECT_EQ(after.back().plans, 0u);
  EXPECT_LE(after.back().fragmentation(), 1.05) << "the arena keeps reserved near the ceiling by moving memory";
}

// PyTorch's backward pass runs on a thread of its own: a second thread that frees the first one's
// blocks (planned ones among them) and allocates its own. The plan goes on under the pool's lock,
// every invariant holds, and the steps after it still map nothing.
TEST(PoolStepPlan, ASecondThreadSharesThePlan) {
  sim_device dev(device());
  pool p(dev.memory(), dev.streams());
  const auto step = fragmenting_step();
  run_steps(p, step, 4);
  ASSERT_GE(p.stats().plans, 1u);
  std::vector<std::pair<void*, std::size_t>> held;
  for (long op : step) {
    if (op <= 0) break;
    held.emplace_back(p.allocate(static_cast<std::size_t>(op)), static_cast<std::size_t>(op));
  }
  std::thread([&] {
    void* q = p.allocate(3 * MiB);
    p.deallocate(q, 3 * MiB);
    for (std::size_t i = 0; i < held.size(); i += 2) p.deallocate(held[i].first, held[i].second);
  }).join();
  p.check_invariants();
  for (std::size_t i = 1; i < held.size(); i += 2) p.deallocate(held[i].first, held[i].second);
  p.check_invariants();
  // Steps whose forward half runs on this thread and whose frees run on another, as a training
  // step's backward pass does.
  const pool_stats before = p.stats();
  for (int s = 0; s < 3; ++s) {
    std::vector<std::pair<void*, std::size_t>> got;
    for (long op : step) {
      if (op > 0) got.emplace_back(p.allocate(static_cast<std::size_t>(op)), static_cast<std::size_t>(op));
      else std::thread([&] { p.deallocate(got[static_cast<std::size_t>(-op - 1)].first, got[static_cast<std::size_t>(-op - 1)].second); }).join();
    }
    p.check_invariants();
  }
  const pool_stats after = p.stats();
  EXPECT_GT(after.plan_hits, before.plan_hits) << "the plan still places blocks with several threads";
  // (Without the plan each of these steps moves dozens of granules; a thread's first free may
  // still cost one.)
  EXPECT_LE(after.maps + after.unmaps, before.maps + before.unmaps + 2) << "and next to no memory moves";
  EXPECT_EQ(after.live_bytes, 0u);
}

TEST(PoolStepPlan, ABlockUsedOnAnotherStreamSendsTheRegionBackFreedOnIt) {
  sim_options so = device();
  so.auto_complete = false;  // streams run only when told
  sim_device dev(so);
  pool p(dev.memory(), dev.streams());
  const auto step = fragmenting_step();
  run_steps(p, step, 4);
  ASSERT_GE(p.stats().plans, 1u);
  const std::size_t first = static_cast<std::size_t>(step[0]);
  void* a = p.allocate(first);
  p.record_use(a, stream_ref{5});
  p.deallocate(a, first);
  p.check_invariants();
  p.trim();
  p.check_invariants();
  EXPECT_EQ(p.stats().live_bytes, 0u);
}

}  // namespace
