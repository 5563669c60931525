#include "support/pool_model.hpp"

#include <fmt/format.h>

#include "front_cache.hpp"
#include "size_class.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <utility>

namespace gpumem::test {

// ---- spy_ordering ----

event_ref spy_ordering::record(stream_ref s) {
  event_ref e = inner_.record(s);
  std::lock_guard lock(m_);
  events_[e] = ev{s, ++recorded_[s]};
  return e;
}

void spy_ordering::learn(const ev& e) {
  auto& k = known_done_[e.stream];
  k = std::max(k, e.index);  // events on one stream complete in order
}

bool spy_ordering::query(event_ref e) {
  const bool done = inner_.query(e);
  std::lock_guard lock(m_);
  auto it = events_.find(e);
  if (it == events_.end()) throw model_error(fmt::format("pool queried event {} it never recorded or already released", e));
  if (done) learn(it->second);
  return done;
}

void spy_ordering::synchronize(event_ref e) {
  inner_.synchronize(e);
  std::lock_guard lock(m_);
  auto it = events_.find(e);
  if (it == events_.end()) throw model_error(fmt::format("pool synchronized on event {} it does not hold", e));
  learn(it->second);
}

void spy_ordering::stream_wait(stream_ref s, event_ref e) {
  inner_.stream_wait(s, e);
  std::lock_guard lock(m_);
  auto it = events_.find(e);
  if (it == events_.end()) throw model_error(fmt::format("pool made a stream wait on event {} it does not hold", e));
  auto& w = waited_[{s, it->second.stream}];
  w = std::max(w, it->second.index);
}

void spy_ordering::release(event_ref e) noexcept {
  inner_.release(e);
  std::lock_guard lock(m_);
  events_.erase(e);
}

std::uint64_t spy_ordering::recorded(stream_ref s) const {
  std::lock_guard lock(m_);
  auto it = recorded_.find(s);
  return it == recorded_.end() ? 0 : it->second;
}

bool spy_ordering::safe_locked(stream_ref t, std::uint64_t c, stream_ref x) const {
  if (t == x) return true;
  if (auto k = known_done_.find(t); k != known_done_.end() && k->second > c) return true;
  if (auto w = waited_.find({x, t}); w != waited_.end() && w->second > c) return true;
  return false;
}

bool spy_ordering::safe(stream_ref t, std::uint64_t c, stream_ref x) const {
  std::lock_guard lock(m_);
  return safe_locked(t, c, x);
}

bool spy_ordering::safe_for_all(stream_ref t, std::uint64_t c) const {
  std::lock_guard lock(m_);
  auto k = known_done_.find(t);
  return k != known_done_.end() && k->second > c;
}

std::uint64_t spy_ordering::live_events() const {
  std::lock_guard lock(m_);
  return events_.size();
}

// ---- spy_upstream ----

void spy_upstream::free_segment(void* base, std::size_t bytes) noexcept {
  if (model_) model_->on_memory_gone(reinterpret_cast<std::uintptr_t>(base), bytes, "free_segment");
  inner_.free_segment(base, bytes);
}
std::optional<physical_handle> spy_upstream::create_physical(std::size_t bytes) {
  auto h = inner_.create_physical(bytes);
  std::lock_guard lock(m_);
  if (h) memory_of_[h->value] = ++next_memory_;  // new memory, whatever its value named before
  return h;
}

void spy_upstream::release_physical(physical_handle h, std::size_t bytes) noexcept {
  {
    std::lock_guard lock(m_);
    memory_of_.erase(h.value);  // its mappings stay, on the old memory, until unmapped
  }
  inner_.release_physical(h, bytes);
}

void spy_upstream::map(void* at, std::size_t bytes, physical_handle h) {
  inner_.map(at, bytes, h);
  std::lock_guard lock(m_);
  const auto a = reinterpret_cast<std::uintptr_t>(at);
  // A handle created before the spy saw it (none in sim_pool_rig) gets its identity here.
  auto [known, fresh] = memory_of_.try_emplace(h.value, next_memory_ + 1);
  if (fresh) ++next_memory_;
  const std::uint64_t memory = known->second;
  mappings_[a] = {bytes, memory};
  places_[memory].push_back(a);
}

void spy_upstream::unmap(void* at, std::size_t bytes) noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(at);
  {
    std::lock_guard lock(m_);  // not held while the model is told: the model may ask for aliases
    for (auto it = mappings_.lower_bound(a); it != mappings_.end() && it->first < a + bytes;) {
      auto& v = places_[it->second.second];
      v.erase(std::find(v.begin(), v.end(), it->first));
      if (v.empty()) places_.erase(it->second.second);
      it = mappings_.erase(it);
    }
  }
  if (model_) model_->on_memory_gone(a, bytes, "unmap");
  inner_.unmap(at, bytes);
}

std::vector<std::pair<std::uintptr_t, std::uintptr_t>> spy_upstream::aliases(std::uintptr_t a, std::uintptr_t end) const {
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> out;
  std::lock_guard lock(m_);
  auto it = mappings_.upper_bound(a);
  if (it != mappings_.begin()) --it;
  for (; it != mappings_.end() && it->first < end; ++it) {
    const std::uintptr_t m0 = it->first, m1 = m0 + it->second.first;
    if (m1 <= a) continue;
    const std::uintptr_t lo = std::max(a, m0) - m0, hi = std::min(end, m1) - m0;  // offsets in the handle
    for (std::uintptr_t other : places_.at(it->second.second))
      if (other != m0) out.push_back({other + lo, other + hi});
  }
  return out;
}

// ---- pool_model ----

std::map<std::uintptr_t, shadow_block>::iterator pool_model::first_live_reaching(std::uintptr_t a) {
  auto l = live_.upper_bound(a);
  if (l != live_.begin() && std::prev(l)->first + std::prev(l)->second.bytes > a) --l;
  return l;
}

std::map<std::uintptr_t, pool_model::freed>::iterator pool_model::first_freed_reaching(std::uintptr_t a) {
  auto f = freed_.upper_bound(a);
  if (f != freed_.begin() && std::prev(f)->second.end > a) --f;
  return f;
}

void pool_model::on_memory_gone(std::uintptr_t a, std::size_t n, const char* how) {
  std::lock_guard lock(m_);
  const std::uintptr_t end = a + n;
  auto l = first_live_reaching(a);
  if (l != live_.end() && l->first < end)
    violations_.push_back(fmt::format("{} of [{:#x}, +{}) under live block {:#x} ({} B)", how, a, n, l->first, l->second.bytes));
  if (!spy_) return;
  auto f = first_freed_reaching(a);
  for (; f != freed_.end() && f->first < end; ++f)
    for (const auto& [t, c] : f->second.marks)
      if (!spy_->safe_for_all(t, c))
        violations_.push_back(fmt::format("{} of [{:#x}, +{}) while {:#x} freed on stream {:#x} may still be in use there",
                                          how, a, n, f->first, t.value()));
}

std::vector<std::string> pool_model::violations() const {
  std::lock_guard lock(m_);
  return violations_;
}

void pool_model::on_allocate(const void* ptr, std::size_t bytes, std::size_t alignment, stream_ref s) {
  if (bytes == 0) {
    if (ptr) throw model_error("a request of 0 bytes returned a pointer");
    return;
  }
  if (!ptr) throw model_error(fmt::format("a request of {} bytes returned nullptr", bytes));
  const auto a = reinterpret_cast<std::uintptr_t>(ptr);
  const std::size_t honoured = std::max(alignment, min_alignment_);
  if (a % honoured)
    throw model_error(fmt::format("{:#x} ({} B) breaks its alignment {}", a, bytes, honoured));
  if (dev_ && !dev_->is_mapped_live(ptr, bytes))
    throw model_error(fmt::format("{:#x} ({} B) is not mapped on the device, or mapped to memory already released", a,
                                  bytes));
  const std::size_t block = block_bytes_ ? block_bytes_(ptr, bytes, alignment) : 0;
  const std::uintptr_t end = a + std::max(footprint_ ? std::max(bytes, footprint_(bytes, alignment)) : bytes, block);
  // The device's mappings are read under the model's lock, so they and the live blocks are seen at
  // one moment: read before it, another thread could unmap a place, map it again and record a
  // live block there in between (its unmap tells the model only after the spy's table changed,
  // and the spy never calls the model while holding its own lock, so this order cannot deadlock).
  std::lock_guard lock(m_);
  const auto elsewhere = aliases_ ? aliases_->aliases(a, end) : std::vector<std::pair<std::uintptr_t, std::uintptr_t>>{};
  // The same memory at another place: no live block there, and what was freed there is safe for
  // `s` (it stays recorded: that place is unmapped later, under the unmap check).
  for (const auto& [x0, x1] : elsewhere) {
    auto l = first_live_reaching(x0);
    if (l != live_.end() && l->first < x1)
      throw model_error(fmt::format("{:#x} ({} B) is the memory of live block {:#x}, mapped there too", a, bytes, l->first));
    if (!spy_) continue;
    auto f = first_freed_reaching(x0);
    for (; f != freed_.end() && f->first < x1; ++f) {
      if (f->second.passed_on) continue;
      for (const auto& [t, c] : f->second.marks)
        if (!spy_->safe(t, c, s))
          throw model_error(fmt::format("{:#x} ({} B) handed to stream {:#x} is the memory at {:#x}, freed on stream {:#x} "
                                        "(after event {}) and maybe still in use there",
                                        a, bytes, s.value(), f->first, t.value(), c));
      f->second.passed_on = true;
    }
  }
  // No overlap with live blocks: the neighbour below must end before a, the one above start after.
  auto next = live_.lower_bound(a);
  if (next != live_.end() && next->first < a + bytes)
    throw model_error(fmt::format("{:#x} ({} B) overlaps live block {:#x} ({} B)", a, bytes, next->first, next->second.bytes));
  if (next != live_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.bytes > a)
      throw model_error(fmt::format("{:#x} ({} B) overlaps live block {:#x} ({} B)", a, bytes, prev->first, prev->second.bytes));
  }
  // Stream safety: every freed range under [a, a+bytes) must be safe for `s`; then it is consumed.
  auto f = first_freed_reaching(a);
  std::vector<std::pair<std::uintptr_t, freed>> keep;  // pieces outside [a, end)
  while (f != freed_.end() && f->first < end) {
    if (spy_) {
      for (const auto& [t, c] : f->second.marks)
        if (!spy_->safe(t, c, s))
          throw model_error(fmt::format(
              "{:#x} ({} B) handed to stream {:#x} while memory at {:#x} freed on stream {:#x} (after event {}) may still "
              "be in use there: no later event on that stream is known complete",
              a, bytes, s.value(), f->first, t.value(), c));
    }
    if (f->first < a) keep.push_back({f->first, freed{a, f->second.marks, f->second.passed_on}});
    if (f->second.end > end) keep.push_back({end, freed{f->second.end, f->second.marks, f->second.passed_on}});
    f = freed_.erase(f);
  }
  for (auto& k : keep) freed_.emplace(k.first, std::move(k.second));
  live_.emplace(a, shadow_block{bytes, alignment, s, {}});
  live_bytes_ += bytes;
}

void pool_model::on_record_use(const void* ptr, stream_ref s) {
  std::lock_guard lock(m_);
  auto it = live_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == live_.end()) throw model_error("record_use of a pointer the model does not hold");
  // Like the pool (and PyTorch's record_stream): use on the allocating stream adds nothing.
  if (s == it->second.stream) return;
  auto& v = it->second.used_on;
  if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
}

shadow_block pool_model::on_free(const void* ptr, stream_ref s) {
  std::lock_guard lock(m_);
  const auto a = reinterpret_cast<std::uintptr_t>(ptr);
  auto it = live_.find(a);
  if (it == live_.end()) throw model_error(fmt::format("free of {:#x}, which the model does not hold", a));
  shadow_block b = std::move(it->second);
  live_.erase(it);
  live_bytes_ -= b.bytes;
  freed rec{a + b.bytes, {}};
  if (spy_) {
    rec.marks.push_back({s, spy_->recorded(s)});
    for (stream_ref u : b.used_on)
      if (u != s) rec.marks.push_back({u, spy_->recorded(u)});
  }
  freed_.emplace(a, std::move(rec));
  return b;
}

void pool_model::check_stats_locked(const pool_stats& st) const {
  if (!violations_.empty()) throw model_error(violations_.front());
  if (!pool_) return;
  if (st.live_bytes != live_bytes_)
    throw model_error(fmt::format("pool says {} B live, the model holds {} B", st.live_bytes, live_bytes_));
  if (st.live_bytes + st.cached_bytes != st.reserved_bytes)
    throw model_error(fmt::format("live {} + cached {} != reserved {}", st.live_bytes, st.cached_bytes, st.reserved_bytes));
  if (st.peak_live_bytes < st.live_bytes || st.peak_reserved_bytes < st.reserved_bytes)
    throw model_error("a peak is below its current value");
  if (dev_ && st.reserved_bytes > dev_->used_bytes())
    throw model_error(fmt::format("pool reserves {} B but the device handed out only {} B", st.reserved_bytes, dev_->used_bytes()));
}

// The pool's figures are read before the model's lock is taken: the pool calls into the model
// (spy_upstream) under its own lock, so the model must never wait for the pool while holding its.
void pool_model::check_stats() const {
  const pool_stats st = pool_ ? pool_->stats() : pool_stats{};
  std::lock_guard lock(m_);
  check_stats_locked(st);
}

void pool_model::check_full() {
  const pool_stats st = pool_ ? pool_->stats() : pool_stats{};
  if (pool_) pool_->check_invariants();
  std::lock_guard lock(m_);
  check_stats_locked(st);
  if (dev_)
    for (const auto& [a, b] : live_)
      if (!dev_->is_mapped_live(reinterpret_cast<const void*>(a), b.bytes))
        throw model_error(fmt::format("live block {:#x} ({} B) is no longer mapped, or mapped to memory already released",
                                      a, b.bytes));
  if (spy_) {
    for (auto it = freed_.begin(); it != freed_.end();) {
      bool all = std::all_of(it->second.marks.begin(), it->second.marks.end(),
                             [&](const auto& m) { return spy_->safe_for_all(m.first, m.second); });
      it = all ? freed_.erase(it) : std::next(it);
    }
  } else {
    freed_.clear();
  }
}

std::size_t pool_model::live_count() const {
  std::lock_guard lock(m_);
  return live_.size();
}
std::size_t pool_model::live_bytes() const {
  std::lock_guard lock(m_);
  return live_bytes_;
}
std::size_t pool_model::freed_records() const {
  std::lock_guard lock(m_);
  return freed_.size();
}
std::vector<std::pair<std::uintptr_t, shadow_block>> pool_model::live_blocks() const {
  std::lock_guard lock(m_);
  return {live_.begin(), live_.end()};
}
bool pool_model::is_live(const void* ptr) const {
  std::lock_guard lock(m_);
  return live_.count(reinterpret_cast<std::uintptr_t>(ptr)) > 0;
}

// ---- misuse_recorder ----

namespace {
std::mutex recorder_mutex;
std::vector<misuse_report> recorded_reports;
void record_report(const misuse_report& r) {
  std::lock_guard lock(recorder_mutex);
  recorded_reports.push_back(r);
}
}  // namespace

misuse_recorder::misuse_recorder() : previous_(set_misuse_handler(&record_report)) {
  std::lock_guard lock(recorder_mutex);
  recorded_reports.clear();
}
misuse_recorder::~misuse_recorder() { set_misuse_handler(previous_); }
std::vector<misuse_report> misuse_recorder::take() {
  std::lock_guard lock(recorder_mutex);
  return std::exchange(recorded_reports, {});
}
std::size_t misuse_recorder::count() const {
  std::lock_guard lock(recorder_mutex);
  return recorded_reports.size();
}

std::size_t log_uniform(std::uint64_t r1, std::uint64_t r2, std::size_t lo, std::size_t hi) {
  const double llo = std::log2(double(lo)), lhi = std::log2(double(hi));
  const double u = double(r1 >> 11) * (1.0 / 9007199254740992.0);
  std::size_t n = static_cast<std::size_t>(std::exp2(llo + u * (lhi - llo)));
  n += r2 % (n / 8 + 1);  // break the bias towards powers of two
  return std::clamp(n, lo, hi);
}

std::function<std::size_t(std::size_t, std::size_t)> pool_footprint(const pool_options& po) {
  const std::size_t small_max = std::min(po.small_max_bytes, std::size_t{1} << 20);
  return [small_max](std::size_t bytes, std::size_t alignment) {
    if (bytes <= small_max && alignment <= detail::class_unit) return detail::size_class_bytes(detail::size_class_of(bytes));
    return align_up(bytes, default_alignment);
  };
}

// ---- sim_pool_rig ----

sim_pool_rig::sim_pool_rig(const sim_options& so, const detail::pool_config& po)
    : dev(std::make_unique<sim_device>(so)),
      spy(std::make_unique<spy_ordering>(dev->streams())),
      up(std::make_unique<spy_upstream>(dev->memory())),
      p(std::make_unique<pool>(*up, *spy, po, po)),
      model(std::make_unique<pool_model>(p.get(), dev.get(), spy.get())) {
  up->watch(model.get());
  model->set_aliases(up.get());
  model->set_footprint(pool_footprint(po));
  if (po.grow_before_reclaim) {
    // A large request may get a cached block up to front_cache::fit_up_classes classes above its
    // own; the pool's block map says which. (A slot may serve a request that is not small, at its
    // class's size: a block starting there larger than that is its slab.)
    const std::size_t small_max = std::min(po.small_max_bytes, std::size_t{1} << 20);
    model->set_block_bytes([q = p.get(), small_max](const void* ptr, std::size_t bytes, std::size_t alignment) {
      if (bytes <= small_max && alignment <= detail::class_unit) return std::size_t{0};
      const std::size_t most = detail::size_class_bytes(detail::size_class_of(align_up(bytes, default_alignment)) +
                                                        detail::front_cache::fit_up_classes);
      for (const block_info& b : q->blocks())
        if (b.address == reinterpret_cast<std::uintptr_t>(ptr)) return b.bytes <= most ? b.bytes : std::size_t{0};
      return std::size_t{0};
    });
  }
}

void* sim_pool_rig::allocate(std::size_t bytes, std::size_t alignment, stream_ref s) {
  void* ptr = p->allocate(bytes, alignment, s);
  model->on_allocate(ptr, bytes, alignment, s);
  return ptr;
}

void sim_pool_rig::deallocate(void* ptr, stream_ref s) {
  shadow_block b = model->on_free(ptr, s);
  p->deallocate(ptr, b.bytes, b.alignment, s);
}

void sim_pool_rig::free_all_and_trim(stream_ref s) {
  for (auto& [a, b] : model->live_blocks()) deallocate(reinterpret_cast<void*>(a), s == stream_ref{} ? b.stream : s);
  p->trim();
  model->check_full();
}

pool_stats stats_after_idle_hole(const sim_options& so, const detail::pool_config& po, std::size_t hole, std::size_t bound,
                                 std::size_t request) {
  sim_pool_rig r(so, po);
  void* a = r.allocate(hole, default_alignment, stream_ref{});
  r.allocate(bound, default_alignment, stream_ref{});
  r.deallocate(a, stream_ref{});
  r.allocate(request, default_alignment, stream_ref{});
  r.model->check_full();
  const pool_stats st = r.p->stats();
  r.free_all_and_trim();
  return st;
}

}  // namespace gpumem::test
