// bench/ab's table of builds when there is one: the tree it is built in, under its own namespace
// (tests/cli/ab.cmake builds and runs this program, so the tool keeps compiling and working;
// scripts/ab_build.sh makes the real comparisons, between revisions).
#include "ab_api.hpp"

std::unique_ptr<ab::pattern_runner> ab_make_self(const ab::pattern& p);
std::size_t ab_make_self_parse_bytes(std::string_view text);

extern const ab_variant_entry ab_variants[] = {{"this tree", ab_make_self, ab_make_self_parse_bytes}};
extern const std::size_t ab_variant_count = 1;
