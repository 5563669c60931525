// Out of memory: the request that cannot fit throws gpumem::out_of_memory (a std::bad_alloc) whose
// report carries the right figures and whose what() states them; the pool stays consistent and
// serves later requests once memory is freed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/pool_model.hpp"

namespace {

using namespace gpumem;
using gpumem::test::sim_pool_rig;
using gpumem::test::KiB;
using gpumem::test::MiB;


class Oom : public ::testing::TestWithParam<bool> {};  // param: virtual memory

TEST_P(Oom, ReportFiguresAreRightAndThePoolRecovers) {
  sim_pool_rig r(sim_options{.capacity_bytes = 16 * MiB, .virtual_memory = GetParam()}, pool_options{});
  const stream_ref A = r.dev->create_stream(), B = r.dev->create_stream();
  void* a = r.allocate(6 * MiB, 256, A);
  void* b = r.allocate(4 * MiB, 256, A);
  void* c = r.allocate(2 * MiB, 256, B);
  void* d = r.allocate(1000, 256, A);  // a slab
  r.deallocate(b, A);                  // 4 MiB cached, owned by A
  r.model->check_full();
  const std::size_t live = 6 * MiB + 2 * MiB + 1000;
  try {
    r.p->allocate(12 * MiB, 256, B);
    FAIL() << "12 MiB fit on a 16 MiB device with " << live << " B live";
  } catch (const std::bad_alloc& e) {
    const auto* oom = dynamic_cast<const out_of_memory*>(&e);
    ASSERT_NE(oom, nullptr) << "not a gpumem::out_of_memory";
    const oom_report& rep = oom->report();
    const pool_stats st = r.p->stats();
    EXPECT_EQ(rep.requested_bytes, 12 * MiB);
    EXPECT_EQ(rep.stream, B);
    EXPECT_EQ(rep.live_bytes, live);
    EXPECT_EQ(rep.reserved_bytes, st.reserved_bytes);
    EXPECT_EQ(rep.cached_bytes, rep.reserved_bytes - rep.live_bytes);
    EXPECT_LE(rep.reserved_bytes, 16 * MiB);
    EXPECT_GE(rep.reserved_bytes, live);
    EXPECT_EQ(rep.largest_free_block_bytes, st.largest_free_block_bytes);
    EXPECT_LT(rep.largest_free_block_bytes, 12 * MiB) << "a free block that fits would have been used";
    EXPECT_DOUBLE_EQ(rep.fragmentation, double(rep.reserved_bytes) / double(rep.live_bytes));
    // The pool waited for everything before failing: nothing is still owned by a stream.
    std::size_t per_stream = 0;
    for (const auto& s : rep.cached_per_stream) per_stream += s.bytes;
    EXPECT_EQ(per_stream, 0u) << "the pool failed while memory freed on a stream was still waiting";
    const std::string what = e.what();
    for (const std::string& fig : {std::to_string(rep.requested_bytes), std::to_string(rep.reserved_bytes),
                                   std::to_string(rep.live_bytes), std::to_string(rep.largest_free_block_bytes)})
      EXPECT_NE(what.find(fig), std::string::npos) << "what() lacks " << fig << ": " << what;
    EXPECT_NE(what.find("out of memory"), std::string::npos) << what;
    EXPECT_EQ(st.failed_allocations, 1u);
  }
  r.model->check_full();
  // Later requests succeed after frees.
  r.deallocate(a, A);
  r.deallocate(c, B);
  void* big = nullptr;
  ASSERT_NO_THROW(big = r.allocate(12 * MiB, 256, B));
  r.model->check_full();
  r.deallocate(big, B);
  r.deallocate(d, A);
  r.free_all_and_trim();
  EXPECT_EQ(r.dev->used_bytes(), 0u);
}

TEST_P(Oom, LargestFreeBlockCountsOnlyUsableMemory) {
  // Three 4 MiB blocks; the middle one freed and everything cached handed back. On the virtual
  // upstream the hole's granules are unmapped: it is address space, not memory, and the report's
  // "largest free block" (pool_stats: "largest mapped free block") must not offer it.
  sim_pool_rig r(sim_options{.capacity_bytes = 64 * MiB, .virtual_memory = GetParam()}, pool_options{});
  void* a = r.allocate(4 * MiB, 256, stream_ref{});
  void* b = r.allocate(4 * MiB, 256, stream_ref{});
  void* c = r.allocate(4 * MiB, 256, stream_ref{});
  r.deallocate(b, stream_ref{});
  r.p->trim();
  r.model->check_full();
  const auto st = r.p->stats();
  EXPECT_LE(st.largest_free_block_bytes, st.cached_bytes)
      << "largest free block " << st.largest_free_block_bytes << " B but only " << st.cached_bytes << " B cached";
  r.deallocate(a, stream_ref{});
  r.deallocate(c, stream_ref{});
  r.free_all_and_trim();
}

TEST_P(Oom, PoolLimitIsReportedAndAdvised) {
  pool_options po;
  po.max_reserved_bytes = 8 * MiB;
  sim_pool_rig r(sim_options{.capacity_bytes = 64 * MiB, .virtual_memory = GetParam()}, po);
  void* a = r.allocate(6 * MiB, 256, stream_ref{});
  try {
    r.p->allocate(4 * MiB, 256, stream_ref{});
    FAIL() << "the pool's own limit was passed";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.report().limit_bytes, 8 * MiB);
    EXPECT_NE(std::string(e.what()).find("max_reserved_bytes"), std::string::npos) << e.what();
  }
  EXPECT_LE(r.p->stats().reserved_bytes, 8 * MiB);
  r.model->check_full();
  r.deallocate(a, stream_ref{});
  EXPECT_NO_THROW(r.deallocate(r.allocate(8 * MiB, 256, stream_ref{}), stream_ref{}));
  r.free_all_and_trim();
  EXPECT_EQ(r.dev->used_bytes(), 0u);
}

TEST_P(Oom, EveryUpstreamCallRefusedThrowsAndLeavesNothing) {
  sim_pool_rig r(sim_options{.capacity_bytes = 64 * MiB, .virtual_memory = GetParam()}, pool_options{});
  void* a = r.allocate(3 * MiB, 256, stream_ref{});
  r.dev->fail_every(true);
  EXPECT_THROW(r.p->allocate(64 * MiB, 256, stream_ref{}), out_of_memory);
  void* small = nullptr;  // a slab still fits in the mapped remainder: no upstream call needed
  ASSERT_NO_THROW(small = r.allocate(200, 256, stream_ref{7}));
  r.deallocate(small, stream_ref{7});
  r.model->check_full();
  r.dev->fail_every(false);
  void* b = nullptr;
  ASSERT_NO_THROW(b = r.allocate(8 * MiB, 256, stream_ref{}));
  r.deallocate(a, stream_ref{});
  r.deallocate(b, stream_ref{});
  r.free_all_and_trim();
  EXPECT_EQ(r.dev->used_bytes(), 0u);
}

// A request larger than the device (a size computed wrong, say) must not leave the pool holding
// the device: memory it reserved on the way, as spares, is memory no other user of the GPU could
// then have.
TEST_P(Oom, ARequestLargerThanTheDeviceTakesNoMemoryOnTheWay) {
  sim_pool_rig r(sim_options{.capacity_bytes = 256 * MiB, .virtual_memory = GetParam()}, pool_options{});
  void* a = r.allocate(16 * MiB, 256, stream_ref{});
  const std::size_t before = r.p->stats().reserved_bytes;
  EXPECT_THROW(r.p->allocate(512 * MiB, 256, stream_ref{}), out_of_memory);
  EXPECT_EQ(r.p->stats().reserved_bytes, before);
  EXPECT_EQ(r.dev->used_bytes(), before);
  EXPECT_EQ(r.p->stats().peak_reserved_bytes, before) << "it grew on the way to failing";
  r.model->check_full();
  r.deallocate(a, stream_ref{});
  r.free_all_and_trim();
}

// Another user of the device holds most of it: the request fits the device's size but not what is
// left. Whatever the pool created on the way to failing goes back.
TEST_P(Oom, AFailedGrowthGivesBackWhatItCreated) {
  sim_pool_rig r(sim_options{.capacity_bytes = 256 * MiB, .virtual_memory = GetParam()}, pool_options{});
  pool other(r.dev->memory(), r.dev->streams(), pool_options{});
  void* held = other.allocate(160 * MiB, 256, stream_ref{});  // 96 MiB of the device left
  void* a = r.allocate(16 * MiB, 256, stream_ref{});
  const std::size_t before = r.p->stats().reserved_bytes;
  EXPECT_THROW(r.p->allocate(128 * MiB, 256, stream_ref{}), out_of_memory);
  EXPECT_EQ(r.p->stats().reserved_bytes, before);
  EXPECT_EQ(r.dev->used_bytes(), before + other.stats().reserved_bytes);
  r.model->check_full();
  r.deallocate(a, stream_ref{});
  r.free_all_and_trim();
  other.deallocate(held, 160 * MiB, 256, stream_ref{});
  other.trim();
}

INSTANTIATE_TEST_SUITE_P(Pool, Oom, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Virtual" : "Segments"; });

}  // namespace
