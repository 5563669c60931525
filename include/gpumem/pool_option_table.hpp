#pragma once
// The pool's options by name: one table of every pool_options field a user may set from text, walked
// by everything that reads or writes them — the CLI's flags (`gpumem replay` / `bench`), the PyTorch
// and CuPy adaptor's `gpumem_configure` / GPUMEM_CONFIG keys, bench's `pool_options` column, and
// the pool's own range checks. Before this table those were four hand-kept lists, and a field added
// to one was missing from another (bench's JSON lacked three of them for a while).
//
// Words:
//   name      the field's name in pool_options; also the GPUMEM_CONFIG key and the key in bench's
//             `pool_options` text ("front_cache_bytes=4194304,grow_before_reclaim=1").
//   alias     a shorter key GPUMEM_CONFIG and the CLI also take ("initial_reserve").
//   kind      how the value is written: bytes (a count with an optional K/M/G/T suffix, or max),
//             flag (0/1, true/false, on/off, yes/no) or number (a real number in a stated range).
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "gpumem/pool.hpp"

namespace gpumem {

struct pool_option_spec {
  using field_ptr = std::variant<std::size_t pool_options::*, bool pool_options::*, double pool_options::*>;
  std::string_view name;
  std::string_view alias = {};  // empty: none
  field_ptr field;
  // Numbers: the value must be in [least, most], or 0 where zero_means_off.
  double least = 0.0;
  double most = 0.0;
  bool zero_means_off = false;
  std::string_view requirement = {};  // numbers: what a good value is, for errors ("a fraction of wall time in [0, 1]")
  std::string_view help = {};    // one paragraph: what the option does, for --help
  // The CLI writes this field in other units: "--remap-cost-us" takes µs for a field in ns.
  std::string_view cli_name = {};  // empty: "--" + name with dashes (and "--" + alias); flags also get "--no-..."
  double cli_scale = 1.0;     // the field is the CLI's value times this
};

// Every option, in pool_options' order.
std::span<const pool_option_spec> pool_option_specs();
// The option called `key` (its name or its alias), or nullptr.
const pool_option_spec* find_pool_option(std::string_view key);

// "4096", "64M", "1.5GiB", "2g", "max" (also none, inf, unlimited: the largest size): bytes.
// Throws std::invalid_argument saying what the text is and why it is not a size.
std::size_t parse_byte_size(std::string_view text);
// "1", "true", "on", "yes" / "0", "false", "off", "no" (any case). Throws std::invalid_argument.
bool parse_flag(std::string_view text);

// Where a value comes from: GPUMEM_CONFIG / gpumem_configure, or the CLI (errors name its flag, and
// numbers are in its units: cli_scale).
enum class pool_option_source { config, command_line };
// Sets `spec`'s field of `o` from text. Throws std::invalid_argument naming the option and the text
// and saying why (not a size, not 0/1, out of range); `o` is then unchanged.
void set_pool_option(pool_options& o, const pool_option_spec& spec, std::string_view text,
                     pool_option_source from = pool_option_source::config);
// A key a GPUMEM_CONFIG text may hold besides pool_options' fields (the PyTorch / CuPy adaptor's
// `upstream` and `trace`): `set` takes the value and returns false when it is not `expects`.
struct pool_config_key {
  std::string_view name;
  std::string_view expects;  // for errors: "vmm, device or async"
  std::function<bool(std::string_view)> set;
};
// Applies a GPUMEM_CONFIG text to `o` and to `extra`'s setters: "key=value,key=value" (';' also
// separates, ':' also assigns, so a flat JSON object reads the same; keys in any case; no comma in
// a value). Throws std::invalid_argument for the first bad item, its text starting with `source`:
//   "GPUMEM_CONFIG: unknown key 'bogus' (known: small_max_bytes, ...)"
//   "GPUMEM_CONFIG: bad value 'lots' for key 'max_handle_bytes': expected a byte size (...)"
// `o` is then unchanged; `extra`'s setters may have taken the items before the bad one.
void parse_pool_config(std::string_view text, pool_options& o, std::span<const pool_config_key> extra = {},
                       std::string_view source = "GPUMEM_CONFIG");
// The CLI11 names of `spec`'s flag: "--idle-budget", "--initial-reserve-bytes,--initial-reserve",
// "--front-cache,!--no-front-cache", "--remap-cost-us".
std::string pool_option_cli_names(const pool_option_spec& spec);
// The field's value as set_pool_option reads it back ("33554432", "1", "0.25").
std::string pool_option_value(const pool_options& o, const pool_option_spec& spec);
// The options of `o` that differ from the defaults, as "name=value,name=value" (empty: none).
std::string changed_pool_options(const pool_options& o);
// The field's value of `o` as a person writes it, in the units of `from`: sizes with the largest
// suffix that is exact ("32M", "1536K", "max", "0"), flags "on" / "off", numbers as they are ("0.25";
// on the command line in cli_scale's units). set_pool_option reads each back to the same value.
std::string pool_option_text(const pool_options& o, const pool_option_spec& spec,
                             pool_option_source from = pool_option_source::config);
// What kind of value the option takes: "bytes", "flag" or "number".
std::string_view pool_option_kind(const pool_option_spec& spec);
// docs/options.md: the table of every option (key, alias, flag, kind, default, range, what it does)
// as Markdown, from the specs above; `gpumem options --markdown` prints it and a test keeps the
// file equal to it.
std::string pool_options_markdown();
// Throws std::invalid_argument ("gpumem::pool: idle_budget -1 is not a fraction >= 0") for the
// first number out of its range. The pool's constructor calls it.
void check_pool_option_ranges(const pool_options& o);

}  // namespace gpumem
