// cmd_logits.cpp: `tprun MODEL_DIR logits --ids 5,17,...` (or --text): one forward pass, then the last
// position's logits over the real vocabulary (padding removed) as JSON on stdout:
// {"ids": [...], "logits": [...]}. For scoring, debugging and backend comparisons.
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/error.h"
#include "model/manifest.h"
#include "tools/stdout_status.h"
#include "tools/tprun/commands.h"
#include "tools/tprun/preflight_model.h"

namespace tpshard::tprun {

void add_logits_command(CLI::App& app, GlobalOptions& g) {
  struct Opts {
    std::string ids, text;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("logits", "print the last position's logits as JSON");
  auto* ids_opt = sub->add_option("--ids", o->ids, "comma-separated token ids");
  auto* text_opt = sub->add_option("--text", o->text, "text, encoded with the model's tokenizer (with BOS etc.)");
  ids_opt->excludes(text_opt);
  g.preflight.push_back([sub, ids_opt, text_opt, o, &g] {
    if (!sub->parsed()) return;
    check_usage(ids_opt->count() + text_opt->count() == 1, "logits: pass --ids or --text", "e.g. --ids 1,15043");
    if (text_opt->count()) {  // --text needs the tokenizer: refused here, before any weight loads
      if (!g.checked_by_launcher) load_preflight_model_with_tokenizer(g.session);
      return;
    }
    // Before any weights load: a malformed list (usage, exit 2), an id the model has no row for (exit 1).
    const int64_t vocab = load_manifest(g.session.model_dir).model.vocab_size;
    for (const int32_t id : parse_token_ids(o->ids, "logits --ids"))
      TPS_CHECK(id < vocab, "logits --ids: token id " + std::to_string(id) + " is outside the vocabulary of " +
                                g.session.model_dir + " (ids 0.." + std::to_string(vocab - 1) + ")",
                "pass ids below " + std::to_string(vocab) + ", or --text to encode text with the model's tokenizer");
  });
  sub->callback([&g, o, text_opt] {
    const std::vector<int32_t> given =
        o->ids.empty() ? std::vector<int32_t>{} : parse_token_ids(o->ids, "logits --ids");
    SessionOptions so = g.session;
    so.max_batch = 1;
    run_on_ranks(so, [&](RankContext& ctx) {
      std::vector<int32_t> ids = given;
      if (text_opt->count()) {
        if (ctx.tokenizer == nullptr) throw no_tokenizer_error(ctx.model_dir);
        ids = ctx.tokenizer->encode(o->text, true);
      }
      TPS_CHECK(!ids.empty(), "logits: no tokens", "pass at least one id");
      const int64_t limit = model_position_limit(ctx.runner->config());
      const bool at_model_limit = limit > 0 && ctx.runner->max_seq_len() >= limit;  // raising it is no way out
      TPS_CHECK(static_cast<int64_t>(ids.size()) <= ctx.runner->max_seq_len(),
                "logits: " + std::to_string(ids.size()) + " tokens exceed " +
                    (at_model_limit ? "the model's context of " : std::string("--max-seq-len ")) +
                    std::to_string(ctx.runner->max_seq_len()),
                at_model_limit ? "pass fewer tokens" : "pass fewer tokens, or raise --max-seq-len (up to " +
                                                           std::to_string(limit) + ", the model's context)");
      const int64_t vocab = ctx.runner->config().vocab_size;
      std::vector<float> logits(vocab);
      SeqChunk chunk;
      chunk.tokens = ids;
      ctx.runner->forward({chunk}, logits.data(), nullptr);
      if (!ctx.is_output_rank()) return;
      nlohmann::json j;
      j["ids"] = ids;
      j["logits"] = logits;
      const std::string s = j.dump();
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fputc('\n', stdout);
      cli::flush_stdout();
    });
  });
}

}  // namespace tpshard::tprun
