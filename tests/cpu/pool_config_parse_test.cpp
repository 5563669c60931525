// gpumem::parse_pool_config, the GPUMEM_CONFIG text's parser: every key of the option table by
// name and alias, extra keys through their setters, and the first bad item refused with its key,
// its value and what was expected, leaving the options unchanged.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "gpumem/pool_option_table.hpp"

namespace {

using gpumem::parse_pool_config;
using gpumem::pool_options;

std::string error_of(std::string_view text, std::span<const gpumem::pool_config_key> extra = {}) {
  pool_options o;
  try {
    parse_pool_config(text, o, extra);
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(gpumem::changed_pool_options(o), "") << "options changed by a refused text: " << text;
    return e.what();
  }
  return "";
}

TEST(PoolConfigParse, TakesNamesAliasesSeparatorsAndJson) {
  pool_options o;
  parse_pool_config("idle_budget=0.05, Front_Cache=off;initial_reserve=1G", o);
  EXPECT_DOUBLE_EQ(o.idle_budget, 0.05);
  EXPECT_FALSE(o.front_cache);
  EXPECT_EQ(o.initial_reserve_bytes, std::size_t{1} << 30);
  pool_options j;
  parse_pool_config(R"({"max_reserved": "2G", "reserve_ceiling": 1.03})", j);
  EXPECT_EQ(j.max_reserved_bytes, std::size_t{2} << 30);
  EXPECT_DOUBLE_EQ(j.reserve_ceiling, 1.03);
  pool_options e;
  parse_pool_config("", e);
  parse_pool_config(" , ;", e);
  EXPECT_EQ(gpumem::changed_pool_options(e), "");
}

TEST(PoolConfigParse, UnknownKeyIsNamedWithEveryKnownKey) {
  const std::string why = error_of("front_cache=0,bogus=1");
  EXPECT_EQ(why.rfind("GPUMEM_CONFIG: unknown key 'bogus' (known: small_max_bytes, ", 0), 0u) << why;
  for (const auto& s : gpumem::pool_option_specs()) EXPECT_NE(why.find(s.name), std::string::npos) << s.name;
  EXPECT_NE(why.find("release_threshold_bytes/release_threshold"), std::string::npos) << why;
}

TEST(PoolConfigParse, BadValueNamesKeyValueAndWhatIsExpected) {
  EXPECT_EQ(error_of("idle_budget=-1"),
            "GPUMEM_CONFIG: bad value '-1' for key 'idle_budget': expected a fraction >= 0");
  EXPECT_EQ(error_of("initial_reserve=lots"),
            "GPUMEM_CONFIG: bad value 'lots' for key 'initial_reserve': expected a byte size (a count with an "
            "optional K, M, G or T suffix, or max)");
  EXPECT_EQ(error_of("front_cache=maybe"),
            "GPUMEM_CONFIG: bad value 'maybe' for key 'front_cache': expected a flag (0/1, true/false, on/off or "
            "yes/no)");
  EXPECT_EQ(error_of("reserve_ceiling=0.5"),
            "GPUMEM_CONFIG: bad value '0.5' for key 'reserve_ceiling': expected 0 (none) or a multiple of peak "
            "live >= 1");
  EXPECT_EQ(error_of("idle_budget="), "GPUMEM_CONFIG: bad value '' for key 'idle_budget': expected a fraction >= 0");
  EXPECT_EQ(error_of("front_cache"), "GPUMEM_CONFIG: 'front_cache' has no value (key=value)");
  // Only the first bad item is reported, and nothing before it is kept.
  EXPECT_EQ(error_of("idle_budget=0.1,idle_budget=x,bogus=1"),
            "GPUMEM_CONFIG: bad value 'x' for key 'idle_budget': expected a fraction >= 0");
}

TEST(PoolConfigParse, ExtraKeysGoThroughTheirSetters) {
  std::string upstream;
  const gpumem::pool_config_key extra[] = {
      {"upstream", "vmm, device or async", [&](std::string_view v) {
         upstream = std::string(v);
         return v == "vmm" || v == "device";
       }}};
  pool_options o;
  parse_pool_config("upstream=device,idle_budget=0.1", o, extra, "gpumem_configure");
  EXPECT_EQ(upstream, "device");
  EXPECT_DOUBLE_EQ(o.idle_budget, 0.1);
  EXPECT_EQ(error_of("upstream=floppy", extra),
            "GPUMEM_CONFIG: bad value 'floppy' for key 'upstream': expected vmm, device or async");
  EXPECT_NE(error_of("trace=x", extra).find("(known: small_max_bytes, "), std::string::npos);
  EXPECT_NE(error_of("trace=x", extra).find(", upstream)"), std::string::npos);
}

}  // namespace
