// The guard adaptor: each check fires on a planted misuse, with a message naming the pointer and
// the sizes; a clean sequence reports nothing. Memory is real host memory (host_backed_resource),
// so canaries and poison are real bytes.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpumem/errors.hpp"
#include "gpumem/guard.hpp"
#include "gpumem/pool.hpp"
#include "gpumem/sim_device.hpp"
#include "support/host_backed_resource.hpp"

namespace {

std::vector<gpumem::misuse_report>& recorded() {
  static std::vector<gpumem::misuse_report> r;
  return r;
}
void record(const gpumem::misuse_report& r) { recorded().push_back(r); }

std::string text(const void* p) { return fmt::format("{}", p); }

class guard_test : public ::testing::Test {
 protected:
  void SetUp() override {
    recorded().clear();
    previous_ = gpumem::set_misuse_handler(&record);
  }
  void TearDown() override { gpumem::set_misuse_handler(previous_); }

  // The one report the test expects; fails the test (with every report seen) otherwise.
  const gpumem::misuse_report& only_report() {
    std::string all;
    for (const auto& r : recorded()) all += gpumem::describe(r) + "\n";
    EXPECT_EQ(recorded().size(), 1u) << all;
    static const gpumem::misuse_report none{gpumem::misuse_kind::wrong_resource, nullptr, 0, 0,
                                            "no report"};
    return recorded().empty() ? none : recorded().front();
  }

  gpumem::testing::host_backed_resource upstream_;
  gpumem::misuse_handler previous_ = nullptr;
};

}  // namespace

// External linkage and no inlining, so the call stack in the leak report names them (the test
// program is linked with ENABLE_EXPORTS, i.e. -rdynamic).
namespace guard_test_sites {
__attribute__((noinline)) void* allocate_at_leak_site(gpumem::guard& g, std::size_t bytes) {
  void* p = g.allocate(bytes, 256, gpumem::stream_ref{0x5eed});
  asm volatile("" ::: "memory");  // keeps this frame from being a tail call
  return p;
}
__attribute__((noinline)) void free_at_first_free_site(gpumem::guard& g, void* p, std::size_t b) {
  g.deallocate(p, b);
  asm volatile("" ::: "memory");
}
}  // namespace guard_test_sites

TEST_F(guard_test, clean_sequence_reports_nothing_and_returns_everything) {
  {
    gpumem::guard g(upstream_);
    std::vector<std::pair<void*, std::size_t>> blocks;
    for (std::size_t i = 1; i <= 50; ++i) {
      const std::size_t bytes = i * 37;
      const std::size_t alignment = std::size_t{1} << (i % 9);
      auto* p = static_cast<unsigned char*>(g.allocate(bytes, alignment, gpumem::stream_ref{i % 3}));
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % alignment, 0u);
      std::memset(p, 0x5a, bytes);  // every byte the caller owns, and not one more
      blocks.emplace_back(p, bytes);
    }
    EXPECT_EQ(g.live().size(), 50u);
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const std::size_t alignment = std::size_t{1} << ((i + 1) % 9);
      g.deallocate(blocks[i].first, blocks[i].second, alignment, gpumem::stream_ref{(i + 1) % 3});
    }
    EXPECT_EQ(g.live_bytes(), 0u);
    EXPECT_EQ(g.check_poison(), 0u);
    EXPECT_EQ(g.leak_report(), "");
    EXPECT_EQ(g.report_leaks(), 0u);
    EXPECT_EQ(g.allocate(0), nullptr);
    g.deallocate(nullptr, 0);
  }
  EXPECT_TRUE(recorded().empty()) << gpumem::describe(recorded().front());
  EXPECT_EQ(upstream_.live_count(), 0u);  // the quarantine went back at destruction
  EXPECT_EQ(upstream_.bad_frees(), 0u);
}

TEST_F(guard_test, double_free_names_both_frees) {
  gpumem::guard g(upstream_);
  void* p = g.allocate(100);
  guard_test_sites::free_at_first_free_site(g, p, 100);
  ASSERT_TRUE(recorded().empty());
  g.deallocate(p, 100);
  const auto& r = only_report();
  EXPECT_EQ(r.kind, gpumem::misuse_kind::double_free);
  EXPECT_EQ(r.pointer, p);
  EXPECT_EQ(r.bytes_given, 100u);
  EXPECT_EQ(r.bytes_expected, 100u);
  EXPECT_NE(r.detail.find(text(p)), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("100 bytes"), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("first freed at"), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("free_at_first_free_site"), std::string::npos) << r.detail;
  EXPECT_EQ(upstream_.bad_frees(), 0u);  // the second free never reached the upstream
}

TEST_F(guard_test, double_free_found_after_the_block_left_quarantine) {
  gpumem::guard_options o;
  o.quarantine_bytes = 0;
  gpumem::guard g(upstream_, o);
  void* p = g.allocate(64);
  g.deallocate(p, 64);
  void* q = g.allocate(32 << 10);  // evicts p from the quarantine, gives it back upstream
  if (q == p) GTEST_SKIP() << "upstream reused the address; a free of it is then legal";
  g.deallocate(p, 64);
  EXPECT_EQ(only_report().kind, gpumem::misuse_kind::double_free);
  g.deallocate(q, 32 << 10);
  EXPECT_EQ(upstream_.bad_frees(), 0u);
}

TEST_F(guard_test, unknown_pointer) {
  gpumem::guard g(upstream_);
  int on_the_stack = 0;
  g.deallocate(&on_the_stack, 4);
  const auto& r = only_report();
  EXPECT_EQ(r.kind, gpumem::misuse_kind::unknown_pointer);
  EXPECT_EQ(r.pointer, &on_the_stack);
  EXPECT_NE(r.detail.find(text(&on_the_stack)), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("4 bytes"), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("never handed it out"), std::string::npos) << r.detail;
  EXPECT_EQ(upstream_.bad_frees(), 0u);
}

TEST_F(guard_test, interior_pointer_names_the_block_it_lies_in) {
  gpumem::guard g(upstream_);
  auto* p = static_cast<unsigned char*>(g.allocate(256));
  g.deallocate(p + 16, 240);
  const auto& r = only_report();
  EXPECT_EQ(r.kind, gpumem::misuse_kind::unknown_pointer);
  EXPECT_EQ(r.pointer, p + 16);
  EXPECT_NE(r.detail.find("interior pointer " + text(p + 16)), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("16 bytes into the live block " + text(p) + " of 256 bytes"),
            std::string::npos)
      << r.detail;
  // The block itself is untouched and frees cleanly.
  recorded().clear();
  g.deallocate(p, 256);
  EXPECT_TRUE(recorded().empty());
}

TEST_F(guard_test, wrong_size_is_reported_and_the_block_freed_with_the_real_size) {
  {
    gpumem::guard g(upstream_);
    void* p = g.allocate(100);
    g.deallocate(p, 99);
    const auto& r = only_report();
    EXPECT_EQ(r.kind, gpumem::misuse_kind::size_mismatch);
    EXPECT_EQ(r.bytes_given, 99u);
    EXPECT_EQ(r.bytes_expected, 100u);
    EXPECT_NE(r.detail.find(text(p)), std::string::npos) << r.detail;
    EXPECT_NE(r.detail.find("size 99 bytes but it was allocated with 100 bytes"), std::string::npos)
        << r.detail;
    EXPECT_EQ(g.live_bytes(), 0u);
  }
  EXPECT_EQ(upstream_.bad_frees(), 0u);
  EXPECT_EQ(upstream_.live_count(), 0u);
}

TEST_F(guard_test, wrong_alignment) {
  gpumem::guard g(upstream_);
  void* p = g.allocate(64, 256);
  g.deallocate(p, 64, 64);
  const auto& r = only_report();
  EXPECT_EQ(r.kind, gpumem::misuse_kind::alignment_mismatch);
  EXPECT_EQ(r.bytes_given, 64u);
  EXPECT_NE(r.detail.find(text(p)), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("alignment 64 but it was allocated with alignment 256"),
            std::string::npos)
      << r.detail;
}

TEST_F(guard_test, overrun_by_one_byte) {
  gpumem::guard g(upstream_);
  auto* p = static_cast<unsigned char*>(g.allocate(100));
  p[100] = 0;  // one byte past the end
  g.deallocate(p, 100);
  const auto& r = only_report();
  EXPECT_EQ(r.kind, gpumem::misuse_kind::buffer_overrun);
  EXPECT_EQ(r.pointer, p);
  EXPECT_EQ(r.bytes_expected, 100u);
  EXPECT_NE(r.detail.find(text(p) + " (100 bytes)"), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("offset 100 (byte 0 past the end) is 0x00"), std::string::npos)
      << r.detail;
  EXPECT_NE(r.detail.find("1 of the 32 canary bytes"), std::string::npos) << r.detail;
}

TEST_F(guard_test, write_after_free_found_by_check_poison) {
  gpumem::guard g(upstream_);
  auto* p = static_cast<unsigned char*>(g.allocate(128));
  g.deallocate(p, 128);
  EXPECT_EQ(g.check_poison(), 0u);
  p[5] = 42;  // planted: the guard still holds this memory in quarantine
  EXPECT_EQ(g.check_poison(), 1u);
  const auto& r = only_report();
  EXPECT_EQ(r.kind, gpumem::misuse_kind::use_after_free);
  EXPECT_EQ(r.pointer, p);
  EXPECT_NE(r.detail.find("write after free to " + text(p) + " (128 bytes)"), std::string::npos)
      << r.detail;
  EXPECT_NE(r.detail.find("offset 5 is 0x2a"), std::string::npos) << r.detail;
  // Reported once: the block was poisoned again.
  EXPECT_EQ(g.check_poison(), 0u);
}

TEST_F(guard_test, write_after_free_found_at_a_later_allocate) {
  gpumem::guard_options o;
  o.quarantine_bytes = 0;  // every freed block is checked and given back at the next allocate
  gpumem::guard g(upstream_, o);
  auto* p = static_cast<unsigned char*>(g.allocate(64));
  g.deallocate(p, 64);
  EXPECT_EQ(g.quarantined_bytes(), 64u + 32u);
  p[63] = 1;
  void* q = g.allocate(16);
  const auto& r = only_report();
  EXPECT_EQ(r.kind, gpumem::misuse_kind::use_after_free);
  EXPECT_NE(r.detail.find("offset 63"), std::string::npos) << r.detail;
  EXPECT_EQ(g.quarantined_bytes(), 0u);
  g.deallocate(q, 16);
}

TEST_F(guard_test, leak_at_shutdown_lists_size_stream_and_call_stack) {
  void* p = nullptr;
  {
    gpumem::guard g(upstream_);
    p = guard_test_sites::allocate_at_leak_site(g, 4000);
    void* freed = g.allocate(10);
    g.deallocate(freed, 10);
    const std::string text_now = g.leak_report();
    EXPECT_NE(text_now.find(text(p)), std::string::npos) << text_now;
    EXPECT_TRUE(recorded().empty());  // leak_report() only describes
  }
  const auto& r = only_report();
  EXPECT_EQ(r.kind, gpumem::misuse_kind::leak);
  EXPECT_EQ(r.pointer, p);
  EXPECT_EQ(r.bytes_expected, 4000u);
  EXPECT_NE(r.detail.find("1 allocation(s) of 4000 bytes"), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find(text(p) + ": 4000 bytes, alignment 256, stream 0x5eed"),
            std::string::npos)
      << r.detail;
  EXPECT_NE(r.detail.find("guard_test_sites::allocate_at_leak_site"), std::string::npos)
      << r.detail;
  // The leaked block stays with the upstream (its owner may still use it); nothing else does.
  EXPECT_EQ(upstream_.live_count(), 1u);
  EXPECT_EQ(upstream_.bad_frees(), 0u);
}

TEST_F(guard_test, report_states_pinned_host_total_and_cap) {
  gpumem::guard_options o;
  o.pinned_host_usage = [] { return std::pair<std::size_t, std::size_t>{3 << 20, 1 << 30}; };
  o.report_leaks_at_destruction = false;
  gpumem::guard g(upstream_, o);
  void* p = g.allocate(8);
  EXPECT_EQ(g.report_leaks(), 1u);
  const auto& r = only_report();
  EXPECT_NE(r.detail.find("pinned host memory in this process: 3145728 bytes of a 1073741824-byte cap"),
            std::string::npos)
      << r.detail;
  g.deallocate(p, 8);
}

TEST_F(guard_test, quarantine_is_bounded_and_gives_back_oldest_first) {
  gpumem::guard_options o;
  o.quarantine_bytes = 1000;
  o.canary_bytes = 0;
  gpumem::guard g(upstream_, o);
  for (int i = 0; i < 10; ++i) g.deallocate(g.allocate(300), 300);
  // At most budget + the last free's block are held.
  EXPECT_LE(g.quarantined_bytes(), 1000u + 300u);
  EXPECT_LE(upstream_.live_count(), 5u);
  EXPECT_TRUE(recorded().empty());
}

TEST_F(guard_test, out_of_memory_upstream_gets_the_quarantine_back_first) {
  gpumem::testing::host_backed_resource small(4096);
  gpumem::guard g(small);
  g.deallocate(g.allocate(3000), 3000);  // 3032 bytes quarantined
  void* p = g.allocate(3000);           // only fits once the quarantine is given back
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(g.quarantined_bytes(), 0u);
  g.deallocate(p, 3000);
  EXPECT_TRUE(recorded().empty());
}

TEST_F(guard_test, bad_requests_throw_clearly) {
  gpumem::guard g(upstream_);
  try {
    (void)g.allocate(64, 48);
    FAIL() << "alignment 48 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("alignment 48 is not a power of two"), std::string::npos);
  }
  EXPECT_THROW((void)g.allocate(~std::size_t{0} - 3), std::invalid_argument);
  EXPECT_THROW((void)g.allocate(std::size_t{2} << 30), std::bad_alloc);  // upstream's refusal
}

// The guard composes with the pool on the simulated device. The simulator's memory is never
// backed, so canaries and poison are off; the bookkeeping checks still run, and a misuse stops at
// the guard: the pool's own handler call would make a second report.
TEST_F(guard_test, over_the_pool_on_the_simulated_device) {
  gpumem::sim_options so;
  so.auto_complete = true;
  gpumem::sim_device dev(so);
  gpumem::pool pool(dev.memory(), dev.streams());
  gpumem::guard_options o;
  o.canary_bytes = 0;
  o.poison_freed = false;
  {
    gpumem::guard g(pool, o);
    void* a = g.allocate(1000);
    void* b = g.allocate(3 << 20);
    g.deallocate(a, 1000);
    g.deallocate(a, 1000);
    EXPECT_EQ(only_report().kind, gpumem::misuse_kind::double_free);
    g.deallocate(b, 3 << 20);
    EXPECT_EQ(g.live_bytes(), 0u);
  }
  EXPECT_EQ(recorded().size(), 1u);
  EXPECT_EQ(pool.stats().live_bytes, 0u);
  pool.check_invariants();
}
