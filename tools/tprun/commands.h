// commands.h: the tprun subcommands. main.cpp parses the global options and registers each
// subcommand; each cmd_*.cpp owns one subcommand's options and its run function.
#pragma once
#include <CLI/CLI.hpp>

#include "runtime/session.h"

namespace tpshard::tprun {

/// Options before the subcommand: MODEL_DIR --tp N --device cpu|cuda|auto --max-batch --max-seq-len ...
struct GlobalOptions {
  SessionOptions session;
};

void add_generate_command(CLI::App& app, GlobalOptions& g);    // cmd_generate.cpp  (generate, chat)
void add_tokenize_commands(CLI::App& app, GlobalOptions& g);   // cmd_tokenize.cpp  (tokenize, detokenize)
void add_logits_command(CLI::App& app, GlobalOptions& g);      // cmd_logits.cpp
void add_eval_command(CLI::App& app, GlobalOptions& g);        // cmd_eval.cpp      (eval triviaqa)
void add_bench_load_command(CLI::App& app, GlobalOptions& g);  // cmd_bench_load.cpp

}  // namespace tpshard::tprun
