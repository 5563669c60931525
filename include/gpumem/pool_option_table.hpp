#pragma once
// The pool's options by name: one table of every pool_options field, walked by everything that
// reads or writes them — the CLI's flags (`gpumem replay` / `bench`), the PyTorch and CuPy
// adaptor's `gpumem_configure` / GPUMEM_CONFIG keys and Python keywords, and bench's
// `pool_options` column — so each option has one name and one default in every channel. The
// policy's own settings (gpumem/detail/pool_tuning.hpp) have no row: a key naming one is unknown.
//
// Words:
//   name      the field's name in pool_options; also the GPUMEM_CONFIG key and the key in bench's
//             `pool_options` text ("max_reserved_bytes=8589934592,zero_on_free=1").
//   alias     a shorter key GPUMEM_CONFIG and the CLI also take ("initial_reserve").
//   kind      how the value is written: bytes (a count with an optional K/M/G/T suffix, or max)
//             or flag (0/1, true/false, on/off, yes/no).
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "gpumem/pool.hpp"

namespace gpumem {

struct pool_option_spec {
  using field_ptr = std::variant<std::size_t pool_options::*, bool pool_options::*>;
  std::string_view name;
  std::string_view alias = {};  // empty: none
  field_ptr field;
  std::string_view help = {};   // one paragraph: what the option does, for --help
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

// Where a value comes from: GPUMEM_CONFIG / gpumem_configure, or the CLI (errors name its flag).
enum class pool_option_source { config, command_line };
// Sets `spec`'s field of `o` from text. Throws std::invalid_argument naming the option and the text
// and saying why (not a size, not 0/1); `o` is then unchanged.
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
//   "GPUMEM_CONFIG: bad value 'lots' for key 'max_reserved_bytes': expected a byte size (...)"
// `o` is then unchanged; `extra`'s setters may have taken the items before the bad one.
void parse_pool_config(std::string_view text, pool_options& o, std::span<const pool_config_key> extra = {},
                       std::string_view source = "GPUMEM_CONFIG");
// The CLI11 names of `spec`'s flag: "--max-reserved-bytes,--max-reserved",
// "--zero-on-free,!--no-zero-on-free".
std::string pool_option_cli_names(const pool_option_spec& spec);
// The field's value as set_pool_option reads it back ("33554432", "1").
std::string pool_option_value(const pool_options& o, const pool_option_spec& spec);
// The options of `o` that differ from the defaults, as "name=value,name=value" (empty: none).
std::string changed_pool_options(const pool_options& o);
// The field's value of `o` as a person writes it: sizes with the largest suffix that is exact
// ("32M", "1536K", "max", "0"), flags "on" / "off". set_pool_option reads each back to the same value.
std::string pool_option_text(const pool_options& o, const pool_option_spec& spec);
// What kind of value the option takes: "bytes" or "flag".
std::string_view pool_option_kind(const pool_option_spec& spec);
// docs/options.md: the table of every option (key, alias, flag, kind, default, what it does)
// as Markdown, from the specs above; `gpumem options --markdown` prints it and a test keeps the
// file equal to it.
std::string pool_options_markdown();

}  // namespace gpumem
