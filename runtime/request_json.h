// request_json.h: a GenerationRequest as JSON. Two views: the fields that decide what is generated (a
// batch job's request_xxh3 hashes them, so their names and values must stay as they are), and every
// field (the server's per-step broadcast from the output rank to the other ranks: exact round trip).
#pragma once
#include <nlohmann/json.hpp>

#include "runtime/generate.h"

namespace tpshard {

/// prompt_ids and every SamplingParams field that changes the output (not the log-probability requests).
nlohmann::json generation_json(const GenerationRequest& r);

/// generation_json plus id, logprobs and prompt_logprobs; request_from_json(request_to_json(r)) == r.
nlohmann::json request_to_json(const GenerationRequest& r);

/// The inverse of request_to_json. Throws nlohmann::json::exception for a missing or mistyped field.
GenerationRequest request_from_json(const nlohmann::json& j);

}  // namespace tpshard
