// cmd_serve.cpp: `tprun MODEL_DIR [--tp N ...] serve [--host H] [--port P] [--served-model-name NAME]`:
// the OpenAI-compatible server (serve/server.h) on every rank of the job.
#include <memory>
#include <string>

#include "common/log.h"
#include "runtime/chat_template.h"
#include "runtime/generation_defaults.h"
#include "serve/server.h"
#include "tools/cli_validators.h"
#include "tools/tprun/commands.h"
#include "tools/tprun/preflight_model.h"

namespace tpshard::tprun {

void add_serve_command(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<serve::ServeOptions>();
  CLI::App* sub = app.add_subcommand(
      "serve", "OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions, /v1/models, /health, /tokenize, /detokenize");
  sub->add_option("--host", o->host, "address to listen on (default 127.0.0.1; 0.0.0.0: every interface)");
  sub->add_option("--port", o->port, "TCP port (default 8000)")->check(CLI::Range(1, 65535));
  sub->add_option("--served-model-name", o->model_name, "the model name of responses (default: the directory's name)");
  sub->add_option("--idle-exit", o->idle_exit_s, "stop after this many seconds without a request (default 0: never)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--api-key", o->api_key, "require \"Authorization: Bearer KEY\" on every request but /health")
      ->check([](const std::string& key) {  // an empty KEY would leave every request unchecked
        return key.empty() ? std::string("an empty --api-key would check nothing: give a non-empty KEY") : std::string();
      });
  sub->add_option("--chat-template", o->chat_template_file,
                  "Jinja chat template file for /v1/chat/completions instead of the model's own");
  sub->add_option("--max-queued", o->max_queued, "requests in flight at most; more get 429 (default 1024)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--drain-timeout", o->drain_timeout_s,
                  "after SIGTERM / SIGINT: seconds to finish the requests in flight before cancelling them (default 60)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--generation-config", o->generation_config,
                  "auto: the model's generation_config.json sampling values are the defaults of the request fields "
                  "a client leaves out (as vLLM); none: the OpenAI defaults")
      ->check(CLI::IsMember({"auto", "none"}))
      ->default_str("auto");
  g.preflight.push_back([sub, &g, o] {
    if (!sub->parsed()) return;
    g.session.interrupt_grace_s = serve::serve_stop_grace_s(*o);  // CUDA launcher: room for the drain
    check_usage(g.session.dp_size == 1, "serve: --dp " + std::to_string(g.session.dp_size) + " is not supported",
                "serve one replica (--tp / --pp); start one server per replica behind a load balancer");
    if (!g.checked_by_launcher) load_preflight_model_with_tokenizer(g.session);
    if (o->generation_config == "auto") {  // a bad file is refused before loading; what applies is named
      SamplingParams shown;  // max_new_tokens is not a request default (serve::ApiLimits::defaults)
      const std::string applied =
          apply_generation_defaults(read_generation_defaults(g.session.model_dir), shown, {"max_new_tokens"});
      if (!applied.empty() && g.primary_process)
        log_line(LogLevel::Info, "tprun: generation_config.json: request defaults %s (--generation-config none: the "
                 "OpenAI defaults)\n", applied.c_str());
    }
    if (!o->chat_template_file.empty()) {  // a given template must load; the model's own may be absent
      cli::check_input_file("serve --chat-template", o->chat_template_file);
      (void)load_chat_template(g.session.model_dir, o->chat_template_file);
    }
  });
  sub->callback([&g, o] { run_on_ranks(g.session, [&](RankContext& ctx) { serve::run_server(ctx, *o); }); });
}

}  // namespace tpshard::tprun
