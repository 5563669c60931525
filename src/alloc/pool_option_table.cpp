#include "gpumem/pool_option_table.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace gpumem {

namespace {

using P = pool_options;

// The help texts say what each option does; pool.hpp's comments on the fields say more.
const std::array<pool_option_spec, 5> specs{{
    {.name = "small_max_bytes",
     .field = &P::small_max_bytes,
     .help = "requests up to this size come from slabs of their size class (at most 1M, the default)"},
    {.name = "release_threshold_bytes",
     .alias = "release_threshold",
     .field = &P::release_threshold_bytes,
     .help = "cached bytes above this go back to the upstream at once (default max: keep everything)"},
    {.name = "max_reserved_bytes",
     .alias = "max_reserved",
     .field = &P::max_reserved_bytes,
     .help = "the most the pool holds from its upstream; past it a request throws out_of_memory (default max)"},
    {.name = "zero_on_free",
     .field = &P::zero_on_free,
     .help = "freed memory is zeroed before another user can get it (needs an upstream that can fill memory)"},
    {.name = "initial_reserve_bytes",
     .alias = "initial_reserve",
     .field = &P::initial_reserve_bytes,
     .help = "what the pool reserves (maps) when it is made, as a pool sized for its job (e.g. 1G; 0, the "
             "default: it grows as requests come)"},
}};

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string lowered(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::span<const pool_option_spec> pool_option_specs() { return specs; }

const pool_option_spec* find_pool_option(std::string_view key) {
  for (const auto& s : specs)
    if (s.name == key || (!s.alias.empty() && s.alias == key)) return &s;
  return nullptr;
}

std::size_t parse_byte_size(std::string_view text) {
  const std::string_view t = trimmed(text);
  auto bad = [&](std::string_view why) {
    return std::invalid_argument(fmt::format("'{}' is not a byte size ({})", text, why));
  };
  const std::string l = lowered(t);
  if (l == "max" || l == "none" || l == "inf" || l == "unlimited") return std::numeric_limits<std::size_t>::max();
  // The number: whole bytes exactly as written; with a fraction ("1.5G") through a double.
  const char* const first = t.data();
  const char* const last = t.data() + t.size();
  std::size_t whole = 0;
  auto [end, ec] = std::from_chars(first, last, whole);
  if (ec == std::errc::result_out_of_range) throw bad("too large");
  if (ec != std::errc() || end == first) throw bad("a number, optionally with K, M, G or T");
  double fractional = -1;  // < 0: the number was whole
  if (end != last && (*end == '.' || *end == 'e' || *end == 'E')) {
    auto r = std::from_chars(first, last, fractional);
    if (r.ec != std::errc() || !(fractional >= 0)) throw bad("a number, optionally with K, M, G or T");
    end = r.ptr;
  }
  std::string suffix = lowered(std::string_view(end, static_cast<std::size_t>(last - end)));
  if (suffix.ends_with("b")) suffix.pop_back();
  if (suffix.size() == 2 && suffix[1] == 'i') suffix.pop_back();
  unsigned shift = 0;
  if (suffix.empty()) shift = 0;
  else if (suffix == "k") shift = 10;
  else if (suffix == "m") shift = 20;
  else if (suffix == "g") shift = 30;
  else if (suffix == "t") shift = 40;
  else throw bad(fmt::format("unknown suffix '{}': K, M, G or T", std::string_view(end, last - end)));
  if (fractional >= 0) {
    const double bytes = std::ldexp(fractional, static_cast<int>(shift));
    if (!(bytes < 0x1p64)) throw bad("too large");
    return static_cast<std::size_t>(bytes);
  }
  if (whole > (std::numeric_limits<std::size_t>::max() >> shift)) throw bad("too large");
  return whole << shift;
}

bool parse_flag(std::string_view text) {
  const std::string l = lowered(trimmed(text));
  if (l == "1" || l == "true" || l == "on" || l == "yes") return true;
  if (l == "0" || l == "false" || l == "off" || l == "no") return false;
  throw std::invalid_argument(fmt::format("'{}' is not a flag (0/1, true/false, on/off or yes/no)", text));
}

void set_pool_option(pool_options& o, const pool_option_spec& spec, std::string_view text,
                     pool_option_source from) {
  try {
    std::visit(
        [&](auto member) {
          if constexpr (std::is_same_v<std::remove_cvref_t<decltype(o.*member)>, std::size_t>)
            o.*member = parse_byte_size(text);
          else
            o.*member = parse_flag(text);
        },
        spec.field);
  } catch (const std::invalid_argument& e) {
    // The option as the caller wrote it: its key, or the first of its flag's names.
    std::string called =
        from == pool_option_source::command_line ? pool_option_cli_names(spec) : std::string(spec.name);
    called.resize(std::min(called.size(), called.find(',')));
    throw std::invalid_argument(fmt::format("{}: {}", called, e.what()));
  }
}

void parse_pool_config(std::string_view text, pool_options& o, std::span<const pool_config_key> extra,
                       std::string_view source) {
  // JSON's quotes and braces are trimmed with the blanks: {"zero_on_free": 1} reads as zero_on_free=1.
  auto strip = [](std::string_view s) {
    const auto b = s.find_first_not_of(" \t\r\n\"'{}");
    if (b == std::string_view::npos) return std::string_view{};
    return s.substr(b, s.find_last_not_of(" \t\r\n\"'{}") - b + 1);
  };
  auto known = [&] {
    std::string names;
    for (const auto& s : specs) names += fmt::format("{}{}{}{}", names.empty() ? "" : ", ", s.name,
                                                     s.alias.empty() ? "" : "/", s.alias);
    for (const auto& k : extra) names += fmt::format(", {}", k.name);
    return names;
  };
  auto expected = [](const pool_option_spec& s) -> std::string_view {
    if (std::holds_alternative<std::size_t P::*>(s.field))
      return "a byte size (a count with an optional K, M, G or T suffix, or max)";
    return "a flag (0/1, true/false, on/off or yes/no)";
  };
  pool_options next = o;
  while (!text.empty()) {
    const auto end = text.find_first_of(",;");
    const std::string_view item = strip(text.substr(0, end));
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    if (item.empty()) continue;
    const auto eq = item.find_first_of("=:");
    const std::string key = lowered(strip(item.substr(0, eq)));
    if (eq == std::string_view::npos)
      throw std::invalid_argument(fmt::format("{}: '{}' has no value (key=value)", source, item));
    const std::string_view value = strip(item.substr(eq + 1));
    if (const pool_option_spec* spec = find_pool_option(key)) {
      try {
        set_pool_option(next, *spec, value);
      } catch (const std::invalid_argument&) {
        throw std::invalid_argument(
            fmt::format("{}: bad value '{}' for key '{}': expected {}", source, value, key, expected(*spec)));
      }
      continue;
    }
    const auto k = std::find_if(extra.begin(), extra.end(), [&](const pool_config_key& x) { return x.name == key; });
    if (k == extra.end())
      throw std::invalid_argument(fmt::format("{}: unknown key '{}' (known: {})", source, key, known()));
    if (!k->set(value))
      throw std::invalid_argument(
          fmt::format("{}: bad value '{}' for key '{}': expected {}", source, value, key, k->expects));
  }
  o = next;
}

std::string pool_option_cli_names(const pool_option_spec& spec) {
  auto dashed = [](std::string_view s) {
    std::string out(s);
    for (char& c : out)
      if (c == '_') c = '-';
    return out;
  };
  std::string names = "--" + dashed(spec.name);
  if (!spec.alias.empty()) names += ",--" + dashed(spec.alias);
  if (std::holds_alternative<bool P::*>(spec.field)) names += ",!--no-" + dashed(spec.name);
  return names;
}

std::string pool_option_value(const pool_options& o, const pool_option_spec& spec) {
  return std::visit(
      [&](auto member) -> std::string {
        if constexpr (std::is_same_v<std::remove_cvref_t<decltype(o.*member)>, bool>)
          return fmt::format("{:d}", o.*member);
        else
          return fmt::format("{}", o.*member);
      },
      spec.field);
}

std::string changed_pool_options(const pool_options& o) {
  const pool_options defaults;
  std::string out;
  for (const auto& s : specs) {
    const std::string v = pool_option_value(o, s);
    if (v == pool_option_value(defaults, s)) continue;
    out += fmt::format("{}{}={}", out.empty() ? "" : ",", s.name, v);
  }
  return out;
}

std::string pool_option_text(const pool_options& o, const pool_option_spec& spec) {
  return std::visit(
      [&](auto member) -> std::string {
        const auto v = o.*member;
        if constexpr (std::is_same_v<decltype(v), const bool>) {
          return v ? "on" : "off";
        } else {
          if (v == std::numeric_limits<std::size_t>::max()) return "max";
          static constexpr std::pair<unsigned, char> suffixes[] = {{40, 'T'}, {30, 'G'}, {20, 'M'}, {10, 'K'}};
          for (const auto& [shift, suffix] : suffixes)
            if (v != 0 && v % (std::size_t{1} << shift) == 0) return fmt::format("{}{}", v >> shift, suffix);
          return fmt::format("{}", v);
        }
      },
      spec.field);
}

std::string_view pool_option_kind(const pool_option_spec& spec) {
  return std::holds_alternative<std::size_t P::*>(spec.field) ? "bytes" : "flag";
}

std::string pool_options_markdown() {
  // A '|' in a help text would end its cell.
  auto cell = [](std::string_view text) {
    std::string out;
    for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
    return out;
  };
  const pool_options defaults;
  std::string md =
      "# Pool options\n\n"
      "<!-- Generated by `gpumem options --markdown` from src/alloc/pool_option_table.cpp; do not edit. The\n"
      "     test cli_options_doc_up_to_date fails when this file and the table differ. -->\n\n"
      "Every field of `gpumem::pool_options`: what a user of the pool decides. The same table gives\n"
      "the command-line flags of `gpumem replay` and `gpumem bench`, the keys of `GPUMEM_CONFIG` and\n"
      "`gpumem_configure` (`key=value,key=value`), the keywords of `gpumem.torch.use` and\n"
      "`gpumem.cupy.use`, and the `pool_options` column of bench's JSON, each with the default below.\n"
      "How the pool meets them (when it grows, what it caches, when it moves memory) is its policy's\n"
      "own business and not an option; a key or flag naming one is refused as unknown.\n\n"
      "Kinds: **bytes** is a count with an optional K, M, G or T suffix (powers of 1024; `KiB`, `kb` and\n"
      "fractions such as `1.5G` too), or `max`; **flag** is 0/1, true/false, on/off or yes/no (on the\n"
      "command line `--x` sets it and `--no-x` clears it).\n\n"
      "| key | alias | flag | kind | default | what it does |\n"
      "|---|---|---|---|---|---|\n";
  for (const auto& s : specs) {
    std::string flag = pool_option_cli_names(s);
    std::string flags;
    for (std::size_t start = 0; start <= flag.size();) {
      std::size_t end = flag.find(',', start);
      if (end == std::string::npos) end = flag.size();
      std::string name = flag.substr(start, end - start);
      if (!name.empty() && name.front() == '!') name.erase(0, 1);
      flags += fmt::format("{}`{}`", flags.empty() ? "" : " ", name);
      start = end + 1;
    }
    md += fmt::format("| `{}` | {} | {} | {} | {} | {} |\n", s.name,
                      s.alias.empty() ? std::string() : fmt::format("`{}`", s.alias), flags, pool_option_kind(s),
                      fmt::format("`{}`", pool_option_text(defaults, s)), cell(s.help));
  }
  return md;
}

}  // namespace gpumem
