#pragma once
// A progress bar on stderr for long work: rows done / total, rate, ETA. Silent when stderr is not
// a terminal, so logs and pipes stay clean.
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace gpumem::tools {

class progress_bar {
 public:
  explicit progress_bar(std::string label, std::string unit = "rows")
      : label_(std::move(label)), unit_(std::move(unit)), on_(isatty(STDERR_FILENO) == 1) {}
  ~progress_bar() { finish(); }
  void operator()(std::uint64_t done, std::uint64_t total) {
    if (!on_ || total == 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double rate = secs > 0 ? double(done) / secs : 0.0;
    const double eta = rate > 0 ? double(total - done) / rate : 0.0;
    const int width = 30;
    const int filled = static_cast<int>(double(width) * double(done) / double(total));
    std::fprintf(stderr, "\r%s [%.*s%*s] %llu/%llu %s  %.1f %s/s  ETA %.1fs ", label_.c_str(), filled,
                 "##############################", width - filled, "", static_cast<unsigned long long>(done),
                 static_cast<unsigned long long>(total), unit_.c_str(), rate, unit_.c_str(), eta);
    drawn_ = true;
  }
  void finish() {
    if (drawn_) std::fprintf(stderr, "\r\033[K");
    drawn_ = false;
  }

 private:
  std::string label_;
  std::string unit_;
  bool on_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace gpumem::tools
