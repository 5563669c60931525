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
  parse_pool_config("release_threshold=64M, Zero_On_Free=on;initial_reserve=1G", o);
  EXPECT_EQ(o.release_threshold_bytes, std::size_t{64} << 20);
  EXPECT_TRUE(o.zero_on_free);
  EXPECT_EQ(o.initial_reserve_bytes, std::size_t{1} << 30);
  pool_options j;
  parse_pool_config(R"({"max_reserved": "2G", "small_max_bytes": 4096})", j);
  EXPECT_EQ(j.max_reserved_bytes, std::size_t{2} << 30);
  EXPECT_EQ(j.small_max_bytes, 4096u);
  pool_options e;
  parse_pool_config("", e);
  parse_pool_config(" , ;", e);
  EXPECT_EQ(gpumem::changed_pool_options(e), "");
}

TEST(PoolConfigParse, UnknownKeyIsNamedWithEveryKnownKey) {
  const std::string why = error_of("zero_on_free=0,bogus=1");
  EXPECT_EQ(why.rfind("GPUMEM_CONFIG: unknown key 'bogus' (known: small_max_bytes, ", 0), 0u) << why;
  for (const auto& s : gpumem::pool_option_specs()) EXPECT_NE(why.find(s.name), std::string::npos) << s.name;
  EXPECT_NE(why.find("release_threshold_bytes/release_threshold"), std::string::npos) << why;
}

TEST(PoolConfigParse, BadValueNamesKeyValueAndWhatIsExpected) {
  EXPECT_EQ(error_of("initial_reserve=lots"),
            "GPUMEM_CONFIG: bad value 'lots' for key 'initial_reserve': expected a byte size (a count with an "
            "optional K, M, G or T suffix, or max)");
  EXPECT_EQ(error_of("zero_on_free=maybe"),
            "GPUMEM_CONFIG: bad value 'maybe' for key 'zero_on_free': expected a flag (0/1, true/false, on/off or "
            "yes/no)");
  EXPECT_EQ(error_of("max_reserved="),
            "GPUMEM_CONFIG: bad value '' for key 'max_reserved': expected a byte size (a count with an optional K, "
            "M, G or T suffix, or max)");
  EXPECT_EQ(error_of("zero_on_free"), "GPUMEM_CONFIG: 'zero_on_free' has no value (key=value)");
  // Only the first bad item is reported, and nothing before it is kept.
  EXPECT_EQ(error_of("zero_on_free=1,zero_on_free=x,bogus=1"),
            "GPUMEM_CONFIG: bad value 'x' for key 'zero_on_free': expected a flag (0/1, true/false, on/off or "
            "yes/no)");
}

TEST(PoolConfigParse, ExtraKeysGoThroughTheirSetters) {
  std::string upstream;
  const gpumem::pool_config_key extra[] = {
      {"upstream", "vmm, device or async", [&](std::string_view v) {
         upstream = std::string(v);
         return v == "vmm" || v == "device";
       }}};
  pool_options o;
  parse_pool_config("upstream=device,max_reserved=8G", o, extra, "gpumem_configure");
  EXPECT_EQ(upstream, "device");
  EXPECT_EQ(o.max_reserved_bytes, std::size_t{8} << 30);
  EXPECT_EQ(error_of("upstream=floppy", extra),
            "GPUMEM_CONFIG: bad value 'floppy' for key 'upstream': expected vmm, device or async");
  EXPECT_NE(error_of("trace=x", extra).find("(known: small_max_bytes, "), std::string::npos);
  EXPECT_NE(error_of("trace=x", extra).find(", upstream)"), std::string::npos);
}

}  // namespace
