// fuzz_openai_api.cpp: the HTTP bodies `tprun serve` accepts from the network: /v1/completions and
// /v1/chat/completions bodies through the real GPT-2 tokenizer and a ChatML template, then the response
// body of each accepted request (fake results of the right lengths).
#include <cstdint>
#include <memory>
#include <string>

#include "format/error.h"
#include "serve/choice_logprobs.h"
#include "serve/openai_api.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tpshard;
  static const std::unique_ptr<Tokenizer> tok = Tokenizer::load(std::string(TPSHARD_FIXTURES_DIR) + "/tokenizers/gpt2");
  static const ChatTemplate chatml = chatml_template();
  serve::ApiLimits limits;
  limits.max_seq_len = 256;
  limits.model_seq_limit = 1024;
  limits.vocab_size = tok->vocab_size();
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const bool chat : {false, true}) {
    try {
      const nlohmann::json body = serve::parse_body(text);
      const serve::ApiRequest r = chat ? serve::parse_chat(body, *tok, &chatml, limits) : serve::parse_completion(body, *tok, limits);
      std::vector<GenerationResult> results(r.prompts.size());
      for (size_t i = 0; i < results.size(); ++i) {
        results[i].output_ids = {r.prompts[i].prompt_ids.back()};
        results[i].finish_reason = "length";
        results[i].text_tokens = 1;
        if (r.prompts[i].params.logprobs >= 0) results[i].logprobs.push_back({results[i].output_ids[0], -1.0f, {}});
      }
      (void)serve::response_body(r, results, *tok, "cmpl-0", 0, "m").dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      nlohmann::json lp;
      if (r.logprobs >= 0) {
        serve::ChoiceLogprobs c(*tok, r.prompts[0].prompt_ids, r.echo, r.logprobs, r.chat);
        c.add(results[0]);
        lp = c.take();
      }
      (void)serve::stream_event(r, 0, "x", "stop", true, "cmpl-0", 0, "m", lp);
    } catch (const serve::ApiError&) {
    } catch (const Error&) {
    }
  }
  return 0;
}
