#include "help_format.hpp"

namespace gpumem::tools {

std::string help_formatter::make_option_name(const CLI::Option* opt, bool is_positional) const {
  if (is_positional) return CLI::Formatter::make_option_name(opt, is_positional);
  std::string names;
  for (const std::string& s : opt->get_snames()) names += (names.empty() ? "-" : ",-") + s;
  for (const std::string& l : opt->get_lnames()) names += (names.empty() ? "--" : ",--") + l;
  return names;
}

}  // namespace gpumem::tools
