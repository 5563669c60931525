// The pool option table (gpumem/pool_option_table.hpp): it has one row per pool_options field and
// no other; every option it names can be set from text, written back and read again to the same
// options; bad text is refused by name and changes nothing; names, aliases and CLI flags never
// collide; the policy's settings (detail::pool_tuning) are no keys, and the pool refuses them out
// of their ranges.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>

#include "gpumem/detail/pool_tuning.hpp"
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

// A value unlike the default, valid for the option: flags flipped, sizes moved.
std::string other_value(const pool_options& defaults, const pool_option_spec& s) {
  if (std::holds_alternative<bool pool_options::*>(s.field))
    return pool_option_value(defaults, s) == "1" ? "0" : "1";
  return pool_option_value(defaults, s) == "4194304" ? "8M" : "4M";
}

// How many fields an aggregate has: the most initializers it takes.
struct any_field {
  template <class T>
  operator T() const;  // never called: only in unevaluated braces
};
template <class T, class... Fields>
constexpr std::size_t field_count() {
  if constexpr (requires { T{Fields{}..., any_field{}}; }) return field_count<T, Fields..., any_field>();
  else return sizeof...(Fields);
}

// What a user decides, and no more: a handful of fields, each a row of the table.
static_assert(field_count<pool_options>() <= 8, "pool_options keeps what a user decides; the policy's settings go in detail::pool_tuning");

TEST(PoolOptionTable, HasOneRowPerPublicFieldAndNoOther) {
  const auto specs = pool_option_specs();
  EXPECT_EQ(specs.size(), field_count<pool_options>());
  for (std::size_t i = 0; i < specs.size(); ++i)
    for (std::size_t j = i + 1; j < specs.size(); ++j)
      EXPECT_FALSE(specs[i].field == specs[j].field) << specs[i].name << " and " << specs[j].name;
  std::set<std::string> names;
  for (const auto& s : pool_option_specs()) names.insert(std::string(s.name));
  EXPECT_EQ(names, (std::set<std::string>{"small_max_bytes", "release_threshold_bytes", "max_reserved_bytes",
                                          "zero_on_free", "initial_reserve_bytes"}));
}

// The policy's settings were options once: their keys are now refused as unknown, by name, with
// the keys that are known, and no flag is made for them.
TEST(PoolOptionTable, ThePolicysSettingsAreNoKeys) {
  for (const char* key : {"min_segment_bytes", "address_range_bytes", "idle_budget", "reserve_ceiling",
                          "max_handle_bytes", "grow_before_reclaim", "front_cache", "front_cache_bytes",
                          "front_cache_grow_fraction", "front_cache_reserve_headroom", "front_cache_peak_fraction",
                          "reclaim_own_first", "wait_before_grow", "remap_time_budget", "remap_cost_ns_per_granule",
                          "stream_ordered_moves"}) {
    EXPECT_EQ(find_pool_option(key), nullptr) << key;
    pool_options o;
    try {
      parse_pool_config(std::string(key) + "=1", o);
      ADD_FAILURE() << key << " was taken";
    } catch (const std::invalid_argument& e) {
      const std::string why = e.what();
      EXPECT_EQ(why.rfind(std::string("GPUMEM_CONFIG: unknown key '") + key + "' (known: small_max_bytes, ", 0), 0u)
          << why;
    }
  }
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
  EXPECT_EQ(pool_option_cli_names(*find_pool_option("zero_on_free")), "--zero-on-free,!--no-zero-on-free");
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
  o.max_reserved_bytes = 123;
  o.zero_on_free = true;
  const std::string before = all_values(o);
  const std::pair<const char*, const char*> bad[] = {
      {"max_reserved_bytes", "lots"}, {"max_reserved_bytes", "-1"}, {"release_threshold", "4X"},
      {"small_max_bytes", ""},        {"zero_on_free", "maybe"},    {"initial_reserve", "99999999999T"},
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
    set_pool_option(o, *find_pool_option("max_reserved"), "lots", pool_option_source::command_line);
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--max-reserved-bytes: 'lots' is not a byte size", 0), 0u) << e.what();
  }
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

// The pool refuses the policy's numbers out of their ranges, naming the field, and makes nothing.
TEST(PoolTuning, PoolConstructorRefusesNumbersOutOfRange) {
  sim_device dev;
  const std::pair<const char*, double detail::pool_tuning::*> numbers[] = {
      {"idle_budget", &detail::pool_tuning::idle_budget},
      {"reserve_ceiling", &detail::pool_tuning::reserve_ceiling},
      {"front_cache_grow_fraction", &detail::pool_tuning::front_cache_grow_fraction},
      {"front_cache_reserve_headroom", &detail::pool_tuning::front_cache_reserve_headroom},
      {"front_cache_peak_fraction", &detail::pool_tuning::front_cache_peak_fraction},
      {"remap_time_budget", &detail::pool_tuning::remap_time_budget},
      {"remap_cost_ns_per_granule", &detail::pool_tuning::remap_cost_ns_per_granule},
  };
  for (const auto& [name, member] : numbers) {
    for (const double bad : {-1.0, std::numeric_limits<double>::quiet_NaN()}) {
      detail::pool_tuning t;
      t.*member = bad;
      try {
        pool p(dev.memory(), dev.streams(), {}, t);
        ADD_FAILURE() << name << " " << bad << " was taken";
      } catch (const std::invalid_argument& e) {
        EXPECT_EQ(std::string(e.what()).rfind(std::string("gpumem::pool: ") + name + " ", 0), 0u) << e.what();
      }
      EXPECT_EQ(dev.used_bytes(), 0u);
    }
  }
  detail::pool_tuning t;
  t.reserve_ceiling = 0.5;  // 0 is "none"; between 0 and 1 is no ceiling a pool can keep
  EXPECT_THROW(pool(dev.memory(), dev.streams(), {}, t), std::invalid_argument);
  t.reserve_ceiling = 0.0;
  t.remap_time_budget = 1.5;  // more than all of wall time
  EXPECT_THROW(pool(dev.memory(), dev.streams(), {}, t), std::invalid_argument);
  t.remap_time_budget = 1.0;
  EXPECT_NO_THROW(pool(dev.memory(), dev.streams(), {}, t));
}

TEST(SimDevice, RefusesACapacityNoDeviceHas) {
  EXPECT_THROW(sim_device(sim_options{.capacity_bytes = 0}), std::invalid_argument);
  EXPECT_THROW(sim_device(sim_options{.capacity_bytes = std::numeric_limits<std::size_t>::max()}),
               std::invalid_argument);
  EXPECT_THROW(sim_device(sim_options{.granularity_bytes = 3 << 20}), std::invalid_argument);
}

}  // namespace
}  // namespace gpumem
