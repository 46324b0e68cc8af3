// server.h: `tprun MODEL serve`: an OpenAI-compatible HTTP server over the model's ranks. The output rank
// (world rank 0) serves HTTP (cpp-httplib, one thread per connection); every rank of the replica runs the
// same BatchGenerator: each loop iteration the output rank broadcasts the requests that arrived
// (RankContext::replica_ranks), all ranks add them and take one generation step, so concurrent requests
// share the continuous batching and the shared-prefix prefill of batch jobs.
// Endpoints: POST /v1/completions, POST /v1/chat/completions (serve/openai_api.h), GET /v1/models,
// GET /health, POST /tokenize, POST /detokenize.
#pragma once
#include <string>

#include "runtime/session_types.h"

namespace tpshard::serve {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string model_name;  ///< the "model" of responses and /v1/models; empty: the model directory's name
  /// Stop after this many seconds without a request (0: never). For tests and batch scripts.
  double idle_exit_s = 0;
  /// Non-empty: every request except GET /health must carry "Authorization: Bearer API_KEY" (else 401).
  std::string api_key;
  /// Requests in flight (queued or running) at most; one more gets 429 (too many requests).
  int max_queued = 1024;
  /// After SIGTERM / SIGINT: seconds to finish the requests in flight (new ones get 503) before the rest
  /// are cancelled (finish_reason "abort"); the server then exits 0. A second signal cancels at once.
  double drain_timeout_s = 60;
  /// Non-empty: the Jinja chat template file of /v1/chat/completions, instead of the model's own.
  std::string chat_template_file;
  /// "auto": the model's generation_config.json sampling values are the defaults of the request fields a
  /// client leaves out (vLLM's --generation-config auto); "none": the OpenAI defaults (temperature 1, ...).
  std::string generation_config = "auto";
};

/// Seconds tprun's launcher (CUDA: one process per GPU) waits between forwarding a stop signal to the
/// serve workers and killing them: the drain, then the time to end the connections and exit.
inline int serve_stop_grace_s(const ServeOptions& o) { return static_cast<int>(o.drain_timeout_s) + 15; }

/// Run the server until a stop signal's drain ends (or idle_exit_s). Collective: every rank of the job calls
/// it. Installs its own SIGTERM / SIGINT handler in the process (a counter the output rank's model loop
/// polls; other ranks follow the output rank's broadcast, so a rank process that gets the signal keeps
/// running until the output rank stops the replica). Throws Error (output rank) when the address cannot
/// be bound, naming it; dp_size > 1 is refused (one replica serves).
void run_server(RankContext& ctx, const ServeOptions& options);

}  // namespace tpshard::serve
