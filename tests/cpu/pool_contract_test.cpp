// The resource contract, run against every resource configuration available on the CPU: the pool
// on the simulated device with virtual memory and with plain segments, each with and without small
// slabs, and exact_resource where the contract applies to it.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

#include "gpumem/pool.hpp"
#include "gpumem/sim_device.hpp"
#include "support/pool_model.hpp"

namespace {

using namespace gpumem;
using gpumem::test::misuse_recorder;
using gpumem::test::pool_model;
using gpumem::test::spy_ordering;

// One resource under test behind a small uniform face.
struct harness {
  std::unique_ptr<sim_device> dev;
  std::unique_ptr<spy_ordering> spy;
  std::unique_ptr<pool> p;
  std::unique_ptr<exact_resource> exact;
  std::unique_ptr<pool_model> model;

  void* allocate(std::size_t bytes, std::size_t alignment = default_alignment, stream_ref s = {}) {
    void* ptr = p ? p->allocate(bytes, alignment, s) : exact->allocate(bytes, alignment, s);
    model->on_allocate(ptr, bytes, alignment, s);
    return ptr;
  }
  // Raw deallocate: no model bookkeeping (for misuse).
  void raw_deallocate(void* ptr, std::size_t bytes, std::size_t alignment = default_alignment, stream_ref s = {}) {
    if (p) p->deallocate(ptr, bytes, alignment, s);
    else exact->deallocate(ptr, bytes, alignment, s);
  }
  void deallocate(void* ptr, std::size_t bytes, std::size_t alignment = default_alignment, stream_ref s = {}) {
    model->on_free(ptr, s);
    raw_deallocate(ptr, bytes, alignment, s);
  }
  void check() { model->check_full(); }
};

template <bool Virtual, bool Slabs>
struct pool_config {
  static constexpr bool is_pool = true;
  static constexpr bool detects_double_free = true;
  static std::unique_ptr<harness> make(std::uintptr_t base = 0x7f0000000000) {
    auto h = std::make_unique<harness>();
    h->dev = std::make_unique<sim_device>(
        sim_options{.capacity_bytes = std::size_t{1} << 30, .virtual_memory = Virtual, .base_address = base});
    h->spy = std::make_unique<spy_ordering>(h->dev->streams());
    pool_options po;
    if (!Slabs) po.small_max_bytes = 0;
    h->p = std::make_unique<pool>(h->dev->memory(), *h->spy, po);
    h->model = std::make_unique<pool_model>(h->p.get(), h->dev.get(), h->spy.get());
    return h;
  }
};

struct exact_config {
  static constexpr bool is_pool = false;
  static constexpr bool detects_double_free = false;  // it keeps no record of freed pointers
  static std::unique_ptr<harness> make() {
    auto h = std::make_unique<harness>();
    h->exact = std::make_unique<exact_resource>(std::size_t{1} << 30);
    h->model = std::make_unique<pool_model>(nullptr, nullptr, nullptr);
    h->model->set_min_alignment(1);  // it packs exactly: a request for alignment 1 gets just that
    return h;
  }
};

using vm_slabs = pool_config<true, true>;
using vm_no_slabs = pool_config<true, false>;
using seg_slabs = pool_config<false, true>;
using seg_no_slabs = pool_config<false, false>;

template <class C>
class ResourceContract : public ::testing::Test {
 protected:
  std::unique_ptr<harness> h = C::make();
};

struct config_names {
  template <class C>
  static std::string GetName(int) {
    if constexpr (std::is_same_v<C, vm_slabs>) return "PoolVirtual";
    else if constexpr (std::is_same_v<C, vm_no_slabs>) return "PoolVirtualNoSlabs";
    else if constexpr (std::is_same_v<C, seg_slabs>) return "PoolSegments";
    else if constexpr (std::is_same_v<C, seg_no_slabs>) return "PoolSegmentsNoSlabs";
    else return "Exact";
  }
};

using all_resources = ::testing::Types<vm_slabs, vm_no_slabs, seg_slabs, seg_no_slabs, exact_config>;
TYPED_TEST_SUITE(ResourceContract, all_resources, config_names);

TYPED_TEST(ResourceContract, SizeZeroReturnsNullptr) {
  EXPECT_EQ(this->h->allocate(0), nullptr);
  EXPECT_EQ(this->h->allocate(0, 4096), nullptr);
  this->h->raw_deallocate(nullptr, 0);
  this->h->check();
}

TYPED_TEST(ResourceContract, SmallAndLargeRequestsAreUsable) {
  for (std::size_t bytes : {std::size_t{1}, std::size_t{255}, std::size_t{256}, std::size_t{4097}, std::size_t{65536},
                            std::size_t{65537}, std::size_t{1} << 20, (std::size_t{3} << 20) + 1, std::size_t{64} << 20}) {
    void* a = this->h->allocate(bytes);
    void* b = this->h->allocate(bytes, 1);
    this->h->check();
    this->h->deallocate(a, bytes);
    this->h->deallocate(b, bytes, 1);
    this->h->check();
  }
}

TYPED_TEST(ResourceContract, EveryPowerOfTwoAlignmentUpToTheGranuleIsHonoured) {
  std::vector<std::pair<void*, std::pair<std::size_t, std::size_t>>> held;
  for (std::size_t align = 1; align <= default_granularity; align *= 2)
    for (std::size_t bytes : {std::size_t{1}, std::size_t{300}, std::size_t{5000}, std::size_t{3} << 20}) {
      void* p = this->h->allocate(bytes, align);  // the model checks p % max(align, 256) == 0
      ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % align, 0u) << bytes << " B at alignment " << align;
      held.push_back({p, {bytes, align}});
    }
  this->h->check();
  for (auto& [p, ba] : held) this->h->deallocate(p, ba.first, ba.second);
  this->h->check();
}

TYPED_TEST(ResourceContract, BadAlignmentThrowsInvalidArgument) {
  for (std::size_t align : {std::size_t{0}, std::size_t{3}, std::size_t{384}, std::size_t{1000},
                            default_granularity * 2, std::size_t{1} << 40, std::numeric_limits<std::size_t>::max()}) {
    try {
      this->h->allocate(1024, align);
      ADD_FAILURE() << "alignment " << align << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("alignment"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::to_string(align)), std::string::npos) << e.what();
    }
  }
  this->h->check();
}

TYPED_TEST(ResourceContract, AbsurdSizesThrowInvalidArgument) {
  for (std::size_t bytes : {std::numeric_limits<std::size_t>::max(), (std::size_t{1} << 47) + 1,
                            std::numeric_limits<std::size_t>::max() - 255, std::size_t{1} << 63}) {
    EXPECT_THROW(this->h->allocate(bytes), std::invalid_argument) << bytes;
    EXPECT_THROW(this->h->allocate(bytes, 4096), std::invalid_argument) << bytes;
  }
  this->h->check();
}

// Misuse must reach the handler exactly once, with the right kind and pointer, and leave the
// resource unchanged: the block stays live and can be freed properly afterwards.
template <class H>
void expect_one_misuse(misuse_recorder& rec, H& h, misuse_kind kind, const void* ptr) {
  auto reports = rec.take();
  ASSERT_EQ(reports.size(), 1u) << "the misuse handler was called " << reports.size() << " times";
  EXPECT_EQ(reports[0].kind, kind) << "got " << to_string(reports[0].kind) << ": " << describe(reports[0]);
  EXPECT_EQ(reports[0].pointer, ptr);
  EXPECT_FALSE(reports[0].detail.empty());
  h.check();
}

TYPED_TEST(ResourceContract, DeallocateNullptrIsANoOp) {
  misuse_recorder rec;
  this->h->raw_deallocate(nullptr, 123);
  this->h->raw_deallocate(nullptr, 0, 4096, stream_ref{7});
  EXPECT_EQ(rec.count(), 0u);
  this->h->check();
}

TYPED_TEST(ResourceContract, UnknownPointerGoesToTheHandler) {
  misuse_recorder rec;
  void* live = this->h->allocate(4096);
  int local = 0;
  this->h->raw_deallocate(&local, 4096);
  expect_one_misuse(rec, *this->h, misuse_kind::unknown_pointer, &local);
  void* wild = reinterpret_cast<void*>(std::uintptr_t{0x1000});
  this->h->raw_deallocate(wild, 256);
  expect_one_misuse(rec, *this->h, misuse_kind::unknown_pointer, wild);
  this->h->deallocate(live, 4096);
  EXPECT_EQ(rec.count(), 0u);
  this->h->check();
}

TYPED_TEST(ResourceContract, InteriorPointerGoesToTheHandlerAndTheBlockStaysLive) {
  misuse_recorder rec;
  for (std::size_t bytes : {std::size_t{2048}, std::size_t{8} << 20}) {
    auto* base = static_cast<char*>(this->h->allocate(bytes));
    this->h->raw_deallocate(base + 256, bytes - 256);
    expect_one_misuse(rec, *this->h, misuse_kind::unknown_pointer, base + 256);
    if constexpr (TypeParam::is_pool) {
      EXPECT_EQ(this->h->p->stats().live_bytes, bytes);
    }
    this->h->deallocate(base, bytes);
    EXPECT_EQ(rec.count(), 0u);
  }
  this->h->check();
}

TYPED_TEST(ResourceContract, DoubleFreeGoesToTheHandler) {
  misuse_recorder rec;
  for (std::size_t bytes : {std::size_t{512}, std::size_t{4} << 20}) {
    void* keep = this->h->allocate(bytes);  // a live neighbour that must survive
    void* p = this->h->allocate(bytes);
    this->h->deallocate(p, bytes);
    this->h->raw_deallocate(p, bytes);
    expect_one_misuse(rec, *this->h, TypeParam::detects_double_free ? misuse_kind::double_free : misuse_kind::unknown_pointer, p);
    this->h->deallocate(keep, bytes);
  }
  this->h->check();
}

TYPED_TEST(ResourceContract, WrongSizeGoesToTheHandlerAndTheBlockStaysLive) {
  misuse_recorder rec;
  for (std::size_t bytes : {std::size_t{1000}, std::size_t{5} << 20}) {
    void* p = this->h->allocate(bytes);
    this->h->raw_deallocate(p, bytes + 1);
    expect_one_misuse(rec, *this->h, misuse_kind::size_mismatch, p);
    this->h->raw_deallocate(p, bytes / 2);
    expect_one_misuse(rec, *this->h, misuse_kind::size_mismatch, p);
    if constexpr (TypeParam::is_pool) {
      EXPECT_EQ(this->h->p->stats().live_bytes, bytes);
    }
    this->h->deallocate(p, bytes);  // the right size still works
    EXPECT_EQ(rec.count(), 0u);
  }
  this->h->check();
}

TYPED_TEST(ResourceContract, PointerOfAnotherResourceGoesToTheHandler) {
  misuse_recorder rec;
  // Another pool on a device whose addresses do not collide with this resource's.
  auto other = pool_config<true, true>::make(0x5f0000000000);
  for (std::size_t bytes : {std::size_t{300}, std::size_t{3} << 20}) {
    void* mine = this->h->allocate(bytes);
    void* theirs = other->allocate(bytes);
    this->h->raw_deallocate(theirs, bytes);
    auto reports = rec.take();
    ASSERT_EQ(reports.size(), 1u);
    // The pool cannot always tell "another pool's" from "unknown"; either name is right.
    EXPECT_TRUE(reports[0].kind == misuse_kind::unknown_pointer || reports[0].kind == misuse_kind::wrong_resource)
        << to_string(reports[0].kind);
    EXPECT_EQ(reports[0].pointer, theirs);
    other->deallocate(theirs, bytes);  // still live there
    this->h->deallocate(mine, bytes);
    other->check();
    this->h->check();
  }
  EXPECT_EQ(rec.count(), 0u);
}

TYPED_TEST(ResourceContract, FreeingEverythingAndTrimmingGivesAllMemoryBack) {
  if constexpr (!TypeParam::is_pool) GTEST_SKIP() << "exact_resource holds no upstream memory";
  else {
    std::vector<std::pair<void*, std::size_t>> held;
    for (std::size_t i = 1; i < 200; ++i) {
      std::size_t bytes = (i * 7919) % (std::size_t{6} << 20) + 1;
      held.push_back({this->h->allocate(bytes, 256, stream_ref{i % 3}), bytes});
    }
    this->h->check();
    EXPECT_GT(this->h->dev->used_bytes(), 0u);
    for (std::size_t i = 0; i < held.size(); ++i) this->h->deallocate(held[i].first, held[i].second, 256, stream_ref{(i + 1) % 3});
    this->h->p->trim();
    this->h->check();
    const auto st = this->h->p->stats();
    EXPECT_EQ(st.live_bytes, 0u);
    EXPECT_EQ(st.reserved_bytes, 0u);
    EXPECT_EQ(this->h->dev->used_bytes(), 0u);
  }
}

}  // namespace
