// cli_subcommands.h: turns CLI11's "A subcommand is required" (what CLI11 2.1 says both for a missing
// subcommand and for an unknown one such as `tpshard frobnicate`) into a tpshard::Error that names the
// word that was not understood, the command level it was given to, and the valid choices.
// Also explains CLI11's "The following arguments were not expected" for options: a global option
// given after the subcommand (tprun MODEL generate --tp 2), a mistyped option (--promt), and an unquoted
// text split into words (chat --prompt Hi there).
// Every other CLI11 parse error keeps its message and gets a hint naming the --help to read
// (explain_parse_error). Owns only that explanation; parsing stays with CLI11 and printing with each
// tool's main.
#pragma once
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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

namespace detail {

/// Levenshtein edit distance (insert, delete, substitute; each costs 1) between a and b.
inline std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

/// `word` as one shell word: unchanged when it has only safe characters, else in single quotes.
inline std::string shell_word(const std::string& word) {
  const bool safe = !word.empty() && std::all_of(word.begin(), word.end(), [](unsigned char c) {
    return std::isalnum(c) != 0 || std::string("-_./,:=+@%").find(static_cast<char>(c)) != std::string::npos;
  });
  if (safe) return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

/// The command levels parse() went through, outermost first: app, then the subcommand parsed at each
/// level (at most one per level in our tools).
inline std::vector<const CLI::App*> parsed_levels(const CLI::App& app) {
  std::vector<const CLI::App*> chain{&app};
  while (!chain.back()->get_subcommands().empty()) chain.push_back(chain.back()->get_subcommands().front());
  return chain;
}

}  // namespace detail

namespace detail {

/// Leftover words that are not options, right after an option's value (`chat --prompt Hi there`: the
/// shell split an unquoted text): "'there' is not an option value: --prompt takes one word", hint: the
/// command line with the words quoted together. nullopt when the first leftover word follows no option value.
inline std::optional<Error> unquoted_value_words(const std::vector<const CLI::App*>& chain, const std::string& program,
                                                 const std::vector<std::string>& args) {
  std::size_t first = args.size();
  for (const CLI::App* level : chain)
    for (const std::string& word : level->remaining()) {
      const auto at = std::find(args.begin(), args.end(), word);
      first = std::min(first, static_cast<std::size_t>(at - args.begin()));
    }
  if (first < 2 || first >= args.size()) return std::nullopt;
  const std::string& option = args[first - 2];
  if (option.size() < 3 || option.compare(0, 2, "--") != 0 || option.find('=') != std::string::npos) return std::nullopt;
  bool takes_value = false;
  for (const CLI::App* level : chain)
    if (const CLI::Option* opt = level->get_option_no_throw(option); opt != nullptr && opt->get_type_size_max() > 0)
      takes_value = true;
  if (!takes_value) return std::nullopt;
  std::size_t end = first;  // the leftover words up to the next option
  while (end < args.size() && !(args[end].size() > 1 && args[end][0] == '-')) ++end;
  std::string joined = args[first - 1];
  for (std::size_t i = first; i < end; ++i) joined += " " + args[i];
  std::string line = program;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (i == first - 1) line += " " + shell_word(joined);
    else if (i < first || i >= end) line += " " + shell_word(args[i]);
  }
  return Error("'" + args[first] + "' is not an option or a value: " + option + " takes one value ('" + args[first - 1] +
                   "'); a text with spaces needs quotes",
               "`" + line + "`");
}

}  // namespace detail

/// Call after app.parse threw `e`, with the command line's words after the program name (`args`).
/// When `e` is CLI11's ExtrasError and a word left over at some parsed command level is an option:
///  - an option of an enclosing level (tprun's --tp after `generate`): "--tp is a tprun option: put it
///    before 'generate'", hint: the same command line with the option (and its value) moved there;
///  - otherwise: "USAGE generate: unknown option --promt", hint: the closest option name of that level
///    (edit distance <= 3 and less than the word's length) and where --help lists them.
/// `program` is the tool's name ("tprun"), `usage` how the top level is typed ("tprun MODEL_DIR").
/// A leftover word that is not an option, right after an option's value: unquoted_value_words.
/// Returns nullopt for other errors and for other leftover words that are not options.
inline std::optional<Error> explain_unexpected_option(const CLI::App& app, const CLI::ParseError& e,
                                                      const std::string& program, const std::string& usage,
                                                      const std::vector<std::string>& args) {
  if (dynamic_cast<const CLI::ExtrasError*>(&e) == nullptr) return std::nullopt;
  const std::vector<const CLI::App*> chain = detail::parsed_levels(app);

  // The leftover option word that comes first on the command line, and the level that left it over.
  std::size_t best_pos = args.size();
  std::size_t best_level = 0;
  for (std::size_t l = 0; l < chain.size(); ++l) {
    for (const std::string& word : chain[l]->remaining()) {
      if (word.size() < 2 || word[0] != '-') continue;
      const auto at = std::find(args.begin(), args.end(), word);
      const std::size_t pos = static_cast<std::size_t>(at - args.begin());
      if (pos < best_pos) best_pos = pos, best_level = l;
    }
  }
  if (best_pos == args.size()) return detail::unquoted_value_words(chain, program, args);
  const std::string word = args[best_pos];
  const std::string name = word.substr(0, word.find('='));
  std::string path = usage;
  for (std::size_t l = 1; l <= best_level; ++l) path += " " + chain[l]->get_name();

  // 1. An option of an enclosing level, given after one of its subcommands.
  for (std::size_t l = best_level; l-- > 0;) {
    const CLI::Option* opt = chain[l]->get_option_no_throw(name);
    if (opt == nullptr || opt->get_positional()) continue;
    const std::string sub = chain[l + 1]->get_name();
    const std::string owner = l == 0 ? program : chain[l]->get_name();
    // Move the option (and its value, unless given as --opt=value) to just before `sub`.
    std::size_t count = 1;
    if (word.find('=') == std::string::npos && opt->get_type_size_max() > 0 && best_pos + 1 < args.size()) count = 2;
    std::vector<std::string> fixed = args;
    const std::vector<std::string> moved(fixed.begin() + static_cast<std::ptrdiff_t>(best_pos),
                                         fixed.begin() + static_cast<std::ptrdiff_t>(best_pos + count));
    fixed.erase(fixed.begin() + static_cast<std::ptrdiff_t>(best_pos),
                fixed.begin() + static_cast<std::ptrdiff_t>(best_pos + count));
    const auto sub_at = std::find(fixed.begin(), fixed.end(), sub);
    fixed.insert(sub_at, moved.begin(), moved.end());
    std::string line = program;
    for (const std::string& w : fixed) line += " " + detail::shell_word(w);
    return Error(name + " is " + (l == 0 ? "a " : "an option of ") + owner + (l == 0 ? " option" : "") +
                     ": put it before '" + sub + "'",
                 "`" + line + "`");
  }

  // 2. Not an option anywhere above: name the closest option of the level it was given to.
  std::string closest;
  std::size_t closest_distance = 4;  // farther than 3 edits is not a typo
  for (const CLI::Option* opt : chain[best_level]->get_options()) {
    if (opt->get_positional()) continue;
    std::vector<std::string> names;
    for (const std::string& n : opt->get_lnames()) names.push_back("--" + n);
    for (const std::string& n : opt->get_snames()) names.push_back("-" + n);
    for (const std::string& n : names) {
      const std::size_t d = detail::edit_distance(name, n);
      if (d < closest_distance && d < name.size()) closest = n, closest_distance = d;
    }
  }
  const std::string help = "`" + path + " --help` lists the options";
  return Error(path + ": unknown option " + name,
               closest.empty() ? help : "did you mean " + closest + "? (" + help + ")");
}

/// Call after app.parse threw `e` and explain_subcommand_error / explain_unexpected_option returned
/// nullopt: CLI11's own message, unchanged ("--tp: must be > 0, got 0", "--out is required", "Could not
/// convert: --tp = 1.5"), as an Error whose hint names the --help of the command level that owns the
/// option the message is about (its first "--name", or a positional's "name:" prefix; the deepest
/// parsed level when none is found): "`tprun --help` lists the options" for the top level (`program`:
/// MODEL_DIR may be what is missing), "`tprun MODEL_DIR generate --help` ..." below it (`usage`).
inline Error explain_parse_error(const CLI::App& app, const CLI::ParseError& e, const std::string& program,
                                 const std::string& usage) {
  const std::vector<const CLI::App*> chain = detail::parsed_levels(app);
  const std::string what = e.what();
  std::string name;
  if (const std::size_t at = what.find("--"); at != std::string::npos) {
    name = what.substr(at, what.find_first_of(" :=,", at) - at);
  } else if (const std::size_t colon = what.find(':'); colon != std::string::npos && colon < what.find(' ')) {
    name = what.substr(0, colon);
  }
  std::size_t level = chain.size() - 1;
  if (!name.empty()) {
    for (std::size_t l = chain.size(); l-- > 0;) {
      if (chain[l]->get_option_no_throw(name) != nullptr) {
        level = l;
        break;
      }
    }
  }
  std::string path = level == 0 ? program : usage;
  for (std::size_t l = 1; l <= level; ++l) path += " " + chain[l]->get_name();
  return Error(what, "`" + path + " --help` lists the options");
}

/// A CLI11 formatter whose usage line of a subcommand starts the way the top level is typed: "Usage:
/// tprun MODEL_DIR [OPTIONS] generate [OPTIONS]". CLI11 2.1 prints "Usage: /path/to/tprun generate
/// [OPTIONS]", which leaves out the top level's required positional. Set it on the top-level app before
/// adding subcommands (they copy the parent's formatter when created).
class UsageFormatter : public CLI::Formatter {
 public:
  explicit UsageFormatter(std::string usage) : usage_(std::move(usage)) {}
  std::string make_usage(const CLI::App* app, std::string name) const override {
    if (app->get_parent() != nullptr) {
      const CLI::App* root = app;
      while (root->get_parent() != nullptr) root = root->get_parent();
      const std::string& root_name = root->get_name();
      if (!root_name.empty() && name.rfind(root_name, 0) == 0) name = usage_ + name.substr(root_name.size());
    }
    return CLI::Formatter::make_usage(app, std::move(name));
  }

 private:
  std::string usage_;
};

}  // namespace tpshard::cli
