// The pool option table (gpumem/pool_option_table.hpp): every option it names can be set from text,
// written back and read again to the same options; bad text is refused by name and changes nothing;
// names, aliases and CLI flags never collide; the pool's constructor refuses what the table refuses.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>

#include "gpumem/pool.hpp"
#include "gpumem/pool_option_table.hpp"
#include "gpumem/sim_device.hpp"

namespace gpumem {
namespace {

// All options' values as text, for comparing two pool_options field by field.
std::string all_values(const pool_options& o) {
  std::string out;
  for (const auto& s : pool_option_specs()) out += std::string(s.name) + "=" + pool_option_value(o, s) + ";";
  return out;
}

// A value unlike the default, valid for the option: flags flipped, sizes and numbers moved inside
// their range.
std::string other_value(const pool_options& defaults, const pool_option_spec& s) {
  if (std::holds_alternative<bool pool_options::*>(s.field))
    return pool_option_value(defaults, s) == "1" ? "0" : "1";
  if (std::holds_alternative<std::size_t pool_options::*>(s.field))
    return pool_option_value(defaults, s) == "4194304" ? "8M" : "4M";
  const double least = s.least, v = s.most > least + 1 ? least + 0.5 : (least + s.most) / 2;
  return std::to_string(v);
}

TEST(PoolOptionTable, NamesAliasesAndFlagsAreUniqueAndFound) {
  std::set<std::string> keys, flags;
  for (const auto& s : pool_option_specs()) {
    EXPECT_TRUE(keys.insert(std::string(s.name)).second) << s.name;
    EXPECT_EQ(find_pool_option(s.name), &s);
    if (!s.alias.empty()) {
      EXPECT_TRUE(keys.insert(std::string(s.alias)).second) << s.alias;
      EXPECT_EQ(find_pool_option(s.alias), &s);
    }
    const std::string names = pool_option_cli_names(s);
    std::size_t at = 0;
    while (at <= names.size()) {
      const std::size_t comma = std::min(names.find(',', at), names.size());
      std::string flag = names.substr(at, comma - at);
      if (!flag.empty() && flag[0] == '!') flag.erase(0, 1);
      EXPECT_TRUE(flag.starts_with("--")) << names;
      EXPECT_TRUE(flags.insert(flag).second) << flag;
      at = comma + 1;
    }
    EXPECT_FALSE(s.help.empty()) << s.name;
  }
  EXPECT_EQ(find_pool_option("no_such_option"), nullptr);
  EXPECT_EQ(pool_option_cli_names(*find_pool_option("initial_reserve_bytes")),
            "--initial-reserve-bytes,--initial-reserve");
  EXPECT_EQ(pool_option_cli_names(*find_pool_option("front_cache")), "--front-cache,!--no-front-cache");
}

// Each option alone: set from text, it is the one option changed_pool_options names, and that text
// read back gives the same options.
TEST(PoolOptionTable, EveryOptionRoundTripsThroughText) {
  const pool_options defaults;
  EXPECT_EQ(changed_pool_options(defaults), "");
  for (const auto& s : pool_option_specs()) {
    pool_options o;
    set_pool_option(o, s, other_value(defaults, s));
    const std::string changed = changed_pool_options(o);
    ASSERT_EQ(changed.rfind(std::string(s.name) + "=", 0), 0u) << changed;
    EXPECT_EQ(changed.find(','), std::string::npos) << changed;
    pool_options back;
    const auto eq = changed.find('=');
    set_pool_option(back, *find_pool_option(changed.substr(0, eq)), changed.substr(eq + 1));
    EXPECT_EQ(all_values(back), all_values(o)) << s.name;
  }
}

TEST(PoolOptionTable, BadTextIsRefusedByNameAndChangesNothing) {
  pool_options o;
  o.idle_budget = 0.25;
  o.front_cache_bytes = 123;
  const std::string before = all_values(o);
  const std::pair<const char*, const char*> bad[] = {
      {"front_cache_bytes", "lots"},   {"front_cache_bytes", "-1"},        {"front_cache_bytes", "4X"},
      {"max_handle_bytes", ""},        {"front_cache", "maybe"},           {"idle_budget", "-0.1"},
      {"idle_budget", "nan"},          {"idle_budget", "0.1x"},            {"reserve_ceiling", "0.5"},
      {"remap_time_budget", "1.5"},    {"front_cache_peak_fraction", "-1"}, {"initial_reserve", "99999999999T"},
  };
  for (auto [key, text] : bad) {
    try {
      set_pool_option(o, *find_pool_option(key), text);
      ADD_FAILURE() << key << "=" << text << " was taken";
    } catch (const std::invalid_argument& e) {
      const std::string why = e.what();
      EXPECT_NE(why.find(find_pool_option(key)->name), std::string::npos) << why;
      EXPECT_NE(why.find(std::string("'") + text + "'"), std::string::npos) << why;
    }
    EXPECT_EQ(all_values(o), before) << key << "=" << text;
  }
  // On the command line the error names the flag.
  try {
    set_pool_option(o, *find_pool_option("reserve_ceiling"), "0.5", pool_option_source::command_line);
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "--reserve-ceiling: '0.5' is not 0 (none) or a multiple of peak live >= 1");
  }
}

TEST(PoolOptionTable, CommandLineUnitsAreScaled) {
  pool_options o;
  set_pool_option(o, *find_pool_option("remap_cost_ns_per_granule"), "36", pool_option_source::command_line);
  EXPECT_EQ(o.remap_cost_ns_per_granule, 36000.0);
  set_pool_option(o, *find_pool_option("remap_cost_ns_per_granule"), "36");
  EXPECT_EQ(o.remap_cost_ns_per_granule, 36.0);
  set_pool_option(o, *find_pool_option("reserve_ceiling"), "0");  // 0 is "none", though below 1
  EXPECT_EQ(o.reserve_ceiling, 0.0);
}

TEST(PoolOptionTable, ByteSizesAndFlags) {
  EXPECT_EQ(parse_byte_size("4096"), 4096u);
  EXPECT_EQ(parse_byte_size(" 64M "), std::size_t{64} << 20);
  EXPECT_EQ(parse_byte_size("64MiB"), std::size_t{64} << 20);
  EXPECT_EQ(parse_byte_size("2g"), std::size_t{2} << 30);
  EXPECT_EQ(parse_byte_size("1.5GiB"), std::size_t{3} << 29);
  EXPECT_EQ(parse_byte_size("1e3"), 1000u);
  EXPECT_EQ(parse_byte_size("2T"), std::size_t{2} << 40);
  EXPECT_EQ(parse_byte_size("18446744073709551615"), std::numeric_limits<std::size_t>::max());
  EXPECT_EQ(parse_byte_size("max"), std::numeric_limits<std::size_t>::max());
  EXPECT_EQ(parse_byte_size("Unlimited"), std::numeric_limits<std::size_t>::max());
  for (const char* bad : {"", "lots", "-1", "1.5X", "18446744073709551616", "16777216T", "1e30", "M"})
    EXPECT_THROW(parse_byte_size(bad), std::invalid_argument) << bad;
  EXPECT_TRUE(parse_flag("ON"));
  EXPECT_TRUE(parse_flag("yes"));
  EXPECT_FALSE(parse_flag("0"));
  EXPECT_THROW(parse_flag("2"), std::invalid_argument);
}

// The pool refuses numbers out of the table's ranges, naming the field, and makes nothing.
TEST(PoolOptionTable, PoolConstructorRefusesWhatTheTableRefuses) {
  sim_device dev;
  for (const auto& s : pool_option_specs()) {
    const auto* member = std::get_if<double pool_options::*>(&s.field);
    if (!member) continue;
    pool_options o;
    // Below the range: under 0, or between 0 ("off") and the least where 0 means off.
    o.**member = s.zero_means_off ? s.least / 2 : s.least - 1.0;
    try {
      pool p(dev.memory(), dev.streams(), o);
      ADD_FAILURE() << s.name << " " << o.**member << " was taken";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).rfind("gpumem::pool: ", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find(s.name), std::string::npos) << e.what();
    }
    EXPECT_EQ(dev.used_bytes(), 0u);
  }
}

TEST(SimDevice, RefusesACapacityNoDeviceHas) {
  EXPECT_THROW(sim_device(sim_options{.capacity_bytes = 0}), std::invalid_argument);
  EXPECT_THROW(sim_device(sim_options{.capacity_bytes = std::numeric_limits<std::size_t>::max()}),
               std::invalid_argument);
  EXPECT_THROW(sim_device(sim_options{.granularity_bytes = 3 << 20}), std::invalid_argument);
}

}  // namespace
}  // namespace gpumem
