// cli_subcommands.h: turns CLI11's "A subcommand is required" (what CLI11 2.1 says both for a missing
// subcommand and for an unknown one such as `tpshard frobnicate`) into a tpshard::Error that names the
// word that was not understood, the command level it was given to, and the valid choices.
// Owns only that explanation; parsing stays with CLI11 and printing with each tool's main.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "format/error.h"

namespace tpshard::cli {

/// Call after app.parse threw `e`. When `e` is CLI11's missing-subcommand error, returns an Error for
/// the deepest parsed command level that requires a subcommand and got none:
///   "tprun MODEL_DIR eval: unknown subcommand 'nosuchtask'"  (the first non-option word left over), or
///   "tpshard: no subcommand given"                            (nothing left over; when a positional
///   argument such as MODEL_DIR took a subcommand's name, it says so),
/// with the hint "choose one of: a, b, c (`USAGE --help` describes each)". Hidden subcommands (empty
/// group) are not listed. `usage` is how the top level is typed ("tpshard", "tprun MODEL_DIR").
/// Returns nullopt for every other parse error (the caller lets CLI11 print those).
inline std::optional<Error> explain_subcommand_error(const CLI::App& app, const CLI::ParseError& e,
                                                     const std::string& usage) {
  if (dynamic_cast<const CLI::RequiredError*>(&e) == nullptr) return std::nullopt;
  const CLI::App* level = &app;
  std::string path = usage;
  while (!level->get_subcommands().empty()) {  // the subcommands parsed at this level (at most one here)
    level = level->get_subcommands().front();
    path += " " + level->get_name();
  }
  const std::size_t needed = level->get_require_subcommand_min();
  // A missing required option at the same level is also a RequiredError: only ours has this exact text.
  if (needed == 0 || std::string(e.what()) != CLI::RequiredError::Subcommand(needed).what()) return std::nullopt;

  std::string choices;
  for (const CLI::App* sub : level->get_subcommands([](const CLI::App* s) { return !s->get_group().empty(); }))
    choices += (choices.empty() ? "" : ", ") + sub->get_name();
  const std::string hint = "choose one of: " + choices + " (`" + path + " --help` describes each)";
  const std::vector<std::string> left = level->remaining();
  // `tprun generate ...` without MODEL_DIR: the positional argument took the subcommand's name.
  for (const CLI::Option* opt : level->get_options([](const CLI::Option* o) { return o->get_positional(); })) {
    for (const std::string& value : opt->results()) {
      const auto named = [&value](const CLI::App* s) { return s->check_name(value); };
      if (!level->get_subcommands(named).empty())
        return Error(path + ": no subcommand given ('" + value + "' was read as " + opt->get_name() + ")",
                     "give " + opt->get_name() + " first, then the subcommand: `" + path + " " + value + " ...`");
    }
  }
  for (const std::string& word : left) {
    if (!word.empty() && word[0] != '-') return Error(path + ": unknown subcommand '" + word + "'", hint);
  }
  if (!left.empty()) return Error(path + ": no subcommand given, and " + left.front() + " is not an option here", hint);
  return Error(path + ": no subcommand given", hint);
}

}  // namespace tpshard::cli
