#include "pool_option_args.hpp"

#include <stdexcept>
#include <string>

#include "gpumem/pool_option_table.hpp"

namespace gpumem::tools {

void add_pool_option_flags(CLI::App& app, pool_options& opts, const char* what) {
  const pool_options defaults;
  for (const pool_option_spec& spec : pool_option_specs()) {
    const std::string names = pool_option_cli_names(spec);
    const std::string help = std::string(what) + ": pool_options::" + std::string(spec.name) + ", " +
                             std::string(spec.help);
    // The default as it is: "(default: off)", "BYTES=max".
    const std::string default_text = pool_option_text(defaults, spec);
    if (const auto* flag = std::get_if<bool pool_options::*>(&spec.field)) {
      // "--x" sets it, "--no-x" clears it (CLI11's '!'), whatever the default.
      app.add_flag(names, opts.**flag, help)->option_text("(default: " + default_text + ")");
      continue;
    }
    app.add_option_function<std::string>(
           names,
           [&opts, &spec](const std::string& text) {
             try {
               set_pool_option(opts, spec, text, pool_option_source::command_line);
             } catch (const std::invalid_argument& e) {
               throw CLI::ValidationError(e.what());
             }
           },
           help)
        ->type_name("BYTES")
        ->default_str(default_text);
  }
}

bool takes_pool_options(const CLI::App& app) {
  const auto specs = pool_option_specs();
  const std::string first = pool_option_cli_names(specs.front());
  return app.get_option_no_throw(first.substr(0, first.find(','))) != nullptr;
}

std::string pool_option_flag_list() {
  std::string out;
  for (const pool_option_spec& spec : pool_option_specs()) {
    const std::string names = pool_option_cli_names(spec);
    out += (out.empty() ? "" : ", ") + names.substr(0, names.find(','));
  }
  return out;
}

}  // namespace gpumem::tools
