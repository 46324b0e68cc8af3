// request_json.cpp: see request_json.h.
#include "runtime/request_json.h"

namespace tpshard {

nlohmann::json generation_json(const GenerationRequest& r) {
  const SamplingParams& p = r.params;
  return {{"prompt_ids", r.prompt_ids},
          {"max_new_tokens", p.max_new_tokens},
          {"min_new_tokens", p.min_new_tokens},
          {"temperature", p.temperature},
          {"top_k", p.top_k},
          {"top_p", p.top_p},
          {"min_p", p.min_p},
          {"repetition_penalty", p.repetition_penalty},
          {"seed", p.seed},
          {"stop", p.stop},
          {"ignore_eos", p.ignore_eos}};
}

nlohmann::json request_to_json(const GenerationRequest& r) {
  nlohmann::json j = generation_json(r);
  j["id"] = r.id;
  j["logprobs"] = r.params.logprobs;
  j["prompt_logprobs"] = r.params.prompt_logprobs;
  return j;
}

GenerationRequest request_from_json(const nlohmann::json& j) {
  GenerationRequest r;
  r.id = j.at("id").get<std::string>();
  r.prompt_ids = j.at("prompt_ids").get<std::vector<int32_t>>();
  SamplingParams& p = r.params;
  p.max_new_tokens = j.at("max_new_tokens").get<int>();
  p.min_new_tokens = j.at("min_new_tokens").get<int>();
  p.temperature = j.at("temperature").get<float>();
  p.top_k = j.at("top_k").get<int>();
  p.top_p = j.at("top_p").get<float>();
  p.min_p = j.at("min_p").get<float>();
  p.repetition_penalty = j.at("repetition_penalty").get<float>();
  p.seed = j.at("seed").get<uint64_t>();
  p.stop = j.at("stop").get<std::vector<std::string>>();
  p.ignore_eos = j.at("ignore_eos").get<bool>();
  p.logprobs = j.at("logprobs").get<int>();
  p.prompt_logprobs = j.at("prompt_logprobs").get<int>();
  return r;
}

}  // namespace tpshard
