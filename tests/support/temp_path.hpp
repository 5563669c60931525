#pragma once
// A temporary file name no other test can take. ctest runs test cases as separate processes in
// parallel (and CI runs several build trees one after another over the same /tmp), so a name built
// from the test's name alone collides: one process removes or truncates the other's file. The
// process id and a per-process counter make it unique.
#include <filesystem>
#include <string>

namespace gpumem::testing_support {

// <tmp>/gpumem_<current test name>_<stem>_<pid>_<n><suffix>
std::filesystem::path unique_temp_path(const std::string& stem, const std::string& suffix);

}  // namespace gpumem::testing_support
