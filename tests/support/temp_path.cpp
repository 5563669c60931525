#include "support/temp_path.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>

namespace gpumem::testing_support {

std::filesystem::path unique_temp_path(const std::string& stem, const std::string& suffix) {
  static std::atomic<unsigned> counter{0};
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string test = info != nullptr ? info->name() : "no_test";
  return std::filesystem::temp_directory_path() /
         ("gpumem_" + test + "_" + stem + "_" + std::to_string(::getpid()) + "_" +
          std::to_string(counter++) + suffix);
}

}  // namespace gpumem::testing_support
