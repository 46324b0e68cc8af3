// cmd_tokenize.cpp: `tprun MODEL_DIR tokenize --text "..." [--no-special]` prints the ids on one line,
// space separated; `tprun MODEL_DIR detokenize --ids 1,2,3 [--skip-special]` prints the text.
// Only the tokenizer files of MODEL_DIR are read (no weights, no ranks).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "format/error.h"
#include "model/manifest.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"
#include "tools/cli_validators.h"
#include "tools/tprun/commands.h"

namespace tpshard::tprun {
namespace {

/// Largest text tokenize --file reads (a device such as /dev/zero or an endless pipe would otherwise grow
/// memory until the process is killed).
constexpr size_t kMaxTokenizeFileBytes = size_t(256) << 20;

std::string read_file(const std::string& path) {
  cli::check_input_file("tokenize --file", path);  // missing, a directory, unreadable: named, with a fix
  std::ifstream in(path, std::ios::binary);
  TPS_CHECK(static_cast<bool>(in), "tokenize --file: cannot open " + path, "check the path");
  std::string text;
  std::vector<char> chunk(size_t(1) << 20);
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    text.append(chunk.data(), static_cast<size_t>(in.gcount()));
    TPS_CHECK(text.size() <= kMaxTokenizeFileBytes,
              "tokenize --file " + path + ": more than " + std::to_string(kMaxTokenizeFileBytes >> 20) + " MiB of text",
              "tokenize a regular file of at most 256 MiB (split larger texts into parts)");
  }
  return text;
}

/// The model directory's tokenizer; checked against its manifest when it has one (load_model_tokenizer:
/// a tokenizer of another model is refused, as generate refuses it).
std::unique_ptr<Tokenizer> open_tokenizer(const std::string& model_dir) {
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::path(model_dir) / "manifest.json", ec)) return Tokenizer::load(model_dir);
  std::unique_ptr<Tokenizer> t = load_model_tokenizer(model_dir, load_manifest(model_dir).model);
  return t ? std::move(t) : Tokenizer::load(model_dir);  // none: Tokenizer::load names the missing files
}

}  // namespace

void add_tokenize_commands(CLI::App& app, GlobalOptions& g) {
  struct Opts {
    std::string text, file, ids;
    bool no_special = false, skip_special = false;
  };
  auto o = std::make_shared<Opts>();

  CLI::App* tok = app.add_subcommand("tokenize", "print the token ids of a text (one line, space separated)");
  auto* text_opt = tok->add_option("--text", o->text, "the text (UTF-8; invalid bytes become U+FFFD)");
  auto* file_opt = tok->add_option("--file", o->file, "read the text from this file instead");
  text_opt->excludes(file_opt);
  tok->add_flag("--no-special", o->no_special, "do not add the post-processor's special tokens (e.g. BOS)");
  g.preflight.push_back([tok, text_opt, file_opt] {
    if (tok->parsed())
      check_usage(text_opt->count() + file_opt->count() == 1, "tokenize: pass --text or --file",
                  "e.g. --text \"Hello world\"");
  });
  tok->callback([&g, o, file_opt] {
    const auto tokenizer = open_tokenizer(g.session.model_dir);
    const std::string text = file_opt->count() ? read_file(o->file) : o->text;
    const std::vector<int32_t> ids = tokenizer->encode(text, !o->no_special);
    std::string line;
    for (size_t k = 0; k < ids.size(); ++k) line += (k ? " " : "") + std::to_string(ids[k]);
    std::printf("%s\n", line.c_str());
  });

  CLI::App* detok = app.add_subcommand("detokenize", "print the text of comma-separated token ids");
  detok->add_option("--ids", o->ids, "comma-separated token ids, e.g. 1,15043,3186")->required();
  detok->add_flag("--skip-special", o->skip_special, "leave out special tokens (BOS, EOS, ...)");
  detok->callback([&g, o] {
    const std::vector<int32_t> ids = parse_token_ids(o->ids, "detokenize --ids");  // before loading anything
    const auto tokenizer = open_tokenizer(g.session.model_dir);
    const std::string text = tokenizer->decode(ids, o->skip_special);
    std::printf("%s\n", text.c_str());
  });
}

}  // namespace tpshard::tprun
