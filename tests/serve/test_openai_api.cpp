// test_openai_api.cpp: request bodies -> GenerationRequests (defaults, every option, every refusal) and
// results -> response bodies (the fields the openai client and lm-evaluation-harness read), with the
// byte tokenizer of the eval tests' fakes.
#include <doctest/doctest.h>

#include <fstream>

#include "runtime/request_json.h"
#include "serve/choice_logprobs.h"
#include "serve/openai_api.h"
#include "tests/eval/fake_model.h"

using namespace tpshard;
using namespace tpshard::serve;
using json = nlohmann::json;

namespace {

ApiLimits limits() {
  ApiLimits l;
  l.max_seq_len = 64;
  l.model_seq_limit = 64;
  l.vocab_size = 258;
  return l;
}

std::string refusal(const json& body, bool chat = false) {
  test::ByteTokenizer tok;
  try {
    if (chat) {
      const ChatTemplate t = chatml_template();
      parse_chat(body, tok, &t, limits());
    } else {
      parse_completion(body, tok, limits());
    }
  } catch (const ApiError& e) {
    CHECK(e.status == 400);
    return e.message;
  }
  return "";
}

}  // namespace

TEST_CASE("completions: prompt forms and options become GenerationRequests") {
  test::ByteTokenizer tok;
  ApiRequest r = parse_completion(json{{"prompt", "ab"}}, tok, limits());
  REQUIRE(r.prompts.size() == 1);
  CHECK(r.prompts[0].prompt_ids == tok.encode("ab", true));
  CHECK(r.prompts[0].params.max_new_tokens == 16);      // OpenAI's default
  CHECK(r.prompts[0].params.temperature == 1.0f);       // OpenAI's default
  CHECK(r.prompts[0].params.logprobs == -1);
  CHECK_FALSE(r.stream);
  r = parse_completion(json{{"prompt", json::array({json::array({5, 6}), "c"})},
                            {"max_tokens", 3}, {"temperature", 0}, {"top_p", 0.5}, {"top_k", 7}, {"seed", 9},
                            {"stop", "zz"}, {"echo", true}, {"logprobs", 2}, {"stream", true}, {"min_tokens", 1},
                            {"repetition_penalty", 1.1}, {"ignore_eos", true}},
                       tok, limits());
  REQUIRE(r.prompts.size() == 2);
  CHECK(r.prompts[0].prompt_ids == std::vector<int32_t>{5, 6});
  const SamplingParams& p = r.prompts[1].params;
  CHECK(p.max_new_tokens == 3);
  CHECK(p.temperature == 0.0f);
  CHECK(p.top_p == 0.5f);
  CHECK(p.top_k == 7);
  CHECK(p.seed == 9);
  CHECK(p.stop == std::vector<std::string>{"zz"});
  CHECK(p.min_new_tokens == 1);
  CHECK(p.ignore_eos);
  CHECK(p.logprobs == 2);
  CHECK(p.prompt_logprobs == 2);  // echo + logprobs
  CHECK(r.echo);
  CHECK(r.stream);
  CHECK(parse_completion(json{{"prompt", json::array({1, 2, 3})}, {"top_k", -1}}, tok, limits()).prompts[0].params.top_k == 0);
  // The broadcast form is exact.
  const GenerationRequest back = request_from_json(request_to_json(r.prompts[1]));
  CHECK(back.prompt_ids == r.prompts[1].prompt_ids);
  CHECK(back.params.top_p == p.top_p);
  CHECK(back.params.repetition_penalty == p.repetition_penalty);
  CHECK(back.params.stop == p.stop);
  CHECK(back.params.prompt_logprobs == 2);
}

TEST_CASE("n: each prompt's n choices at prompt_index * n + c, same prompt and id, seed + c") {
  test::ByteTokenizer tok;
  const ApiRequest r = parse_completion(json{{"prompt", json::array({"ab", "xyz"})}, {"n", 3}, {"seed", 10},
                                             {"temperature", 0.7}, {"max_tokens", 4}},
                                        tok, limits());
  CHECK(r.n == 3);
  REQUIRE(r.prompts.size() == 6);
  for (size_t k = 0; k < 6; ++k) {
    CAPTURE(k);
    CHECK(r.prompts[k].id == std::to_string(k / 3));  // the prompt's id: the RNG key of a one-choice request
    CHECK(r.prompts[k].prompt_ids == tok.encode(k < 3 ? "ab" : "xyz", true));
    CHECK(r.prompts[k].params.seed == 10 + k % 3);
    CHECK(r.prompts[k].params.max_new_tokens == 4);
  }
  const ChatTemplate t = chatml_template();
  const ApiRequest chat =
      parse_chat(json{{"messages", json::array({json{{"role", "user"}, {"content", "hi"}}})}, {"n", 2}}, tok, &t, limits());
  REQUIRE(chat.prompts.size() == 2);
  CHECK(chat.prompts[0].prompt_ids == chat.prompts[1].prompt_ids);
  CHECK(chat.prompts[0].params.seed == 0);
  CHECK(chat.prompts[1].params.seed == 1);
  // usage: each prompt once, every choice's tokens; choices indexed 0..5.
  std::vector<GenerationResult> results(6);
  for (size_t k = 0; k < 6; ++k) {
    results[k].output_ids.assign(k + 1, 'q');
    results[k].text = std::string(k + 1, 'q');
    results[k].finish_reason = "length";
  }
  const json j = response_body(r, results, tok, "cmpl-1", 100, "m");
  REQUIRE(j["choices"].size() == 6);
  for (size_t k = 0; k < 6; ++k) {
    CHECK(j["choices"][k]["index"] == k);
    CHECK(j["choices"][k]["text"] == std::string(k + 1, 'q'));
  }
  CHECK(j["usage"]["prompt_tokens"] == tok.encode("ab", true).size() + tok.encode("xyz", true).size());
  CHECK(j["usage"]["completion_tokens"] == 1 + 2 + 3 + 4 + 5 + 6);
}

TEST_CASE("the model's generation_config defaults replace the OpenAI defaults of omitted fields only") {
  test::ByteTokenizer tok;
  ApiLimits l = limits();
  l.defaults.temperature = 0.6f;
  l.defaults.top_p = 0.9f;
  l.defaults.top_k = 20;
  l.defaults.repetition_penalty = 1.05f;
  l.defaults.max_new_tokens = 40;  // not a request default: max_tokens keeps OpenAI's
  const SamplingParams p = parse_completion(json{{"prompt", "ab"}}, tok, l).prompts[0].params;
  CHECK(p.temperature == 0.6f);
  CHECK(p.top_p == 0.9f);
  CHECK(p.top_k == 20);
  CHECK(p.repetition_penalty == 1.05f);
  CHECK(p.min_p == 0.0f);           // absent from the file: OpenAI's
  CHECK(p.max_new_tokens == 16);
  const SamplingParams given =
      parse_completion(json{{"prompt", "ab"}, {"temperature", 0}, {"top_k", -1}}, tok, l).prompts[0].params;
  CHECK(given.temperature == 0.0f);  // the request's value wins
  CHECK(given.top_k == 0);
  CHECK(given.top_p == 0.9f);
  const ChatTemplate t = chatml_template();
  const SamplingParams chat =
      parse_chat(json{{"messages", json::array({json{{"role", "user"}, {"content", "hi"}}})}}, tok, &t, l).prompts[0].params;
  CHECK(chat.temperature == 0.6f);
  CHECK(chat.top_k == 20);
}

TEST_CASE("completions and chat: bad bodies get a 400 naming the field") {
  CHECK(refusal(json::array()).find("JSON object") != std::string::npos);
  CHECK(refusal(json::object()).find("'prompt' is required") != std::string::npos);
  CHECK(refusal(json{{"prompt", 5}}).find("'prompt' must be") != std::string::npos);
  CHECK(refusal(json{{"prompt", "a"}, {"n", 17}}) == "'n' = 17 is above 16 (choices per prompt)");
  CHECK(refusal(json{{"prompt", "a"}, {"n", 0}}) == "'n' = 0 is below 1 (choices per prompt)");
  CHECK(refusal(json{{"prompt", "a"}, {"n", 2}, {"best_of", 3}}).find("'best_of'") != std::string::npos);
  CHECK(refusal(json{{"prompt", "a"}, {"n", 16}, {"best_of", 16}}).empty());
  CHECK(refusal(json{{"messages", json::array({json{{"role", "user"}, {"content", "x"}}})}, {"n", 17}}, true)
            .find("'n' = 17") != std::string::npos);
  CHECK(refusal(json{{"prompt", "a"}, {"temperature", "hot"}}).find("'temperature' must be a number") != std::string::npos);
  CHECK(refusal(json{{"prompt", "a"}, {"top_p", 2}}).find("'top_p'") != std::string::npos);
  CHECK(refusal(json{{"prompt", "a"}, {"logprobs", 21}}).find("'logprobs'") != std::string::npos);
  CHECK(refusal(json{{"prompt", "a"}, {"frequency_penalty", 0.5}}).find("not supported") != std::string::npos);
  CHECK(refusal(json{{"prompt", json::array({1, 999})}}).find("outside the vocabulary") != std::string::npos);
  CHECK(refusal(json{{"prompt", json::array({1, -1})}}).find("outside the vocabulary") != std::string::npos);
  CHECK(refusal(json{{"prompt", std::string(70, 'a')}}).find("prompt 0: prompt of 71 tokens exceeds") != std::string::npos);
  // chat: the rendered conversation is what must fit, and the error says so
  CHECK(refusal(json{{"messages", json::array({json{{"role", "user"}, {"content", std::string(70, 'a')}}})}}, true)
            .find("messages (rendered by the chat template): prompt of") != std::string::npos);
  // the API's field names, not the generator's
  const std::string too_many = refusal(json{{"prompt", "aaaa"}, {"max_tokens", 100}});
  CHECK(too_many.find("max_tokens 100") != std::string::npos);
  CHECK(too_many.find("max_new_tokens") == std::string::npos);
  CHECK(refusal(json{{"prompt", "a"}, {"max_tokens", 2}, {"min_tokens", 5}}).find("min_tokens 5 is greater than max_tokens 2") !=
        std::string::npos);
  CHECK(refusal(json{{"prompt", "a"}, {"stop", json::array({1})}}).find("'stop'") != std::string::npos);
  CHECK(refusal(json{{"prompt", "a"}, {"max_tokens", 1e300}}) == "'max_tokens' = 1e+300 is outside [0, 2147483647]");
  CHECK(refusal(json{{"prompt", "a"}, {"max_tokens", 2.5}}) == "'max_tokens' must be an integer");
  CHECK(refusal(json{{"prompt", "a"}, {"seed", 1e23}}).find("'seed' = 1e+23 is outside") == 0);
  CHECK(refusal(json{{"prompt", "a"}, {"temperature", 1e308}}) == "'temperature' = 1e+308 is outside [0, 100]");
  CHECK(refusal(json{{"prompt", "a"}, {"logprobs", -1}}) == "'logprobs' = -1 is outside [0, 20]");
  CHECK(refusal(json{{"prompt", "a"}, {"logprobs", nullptr}}).empty());
  CHECK(refusal(json{{"prompt", json::array()}}) == "'prompt' is an empty list");
  CHECK(refusal(json{{"prompt", json::array({json::array({5}), json::array()})}}) == "prompt 1 is an empty list of token ids");
  CHECK(refusal(json{{"prompt", "a"}, {"max_token", 5}}) == "unknown field 'max_token'");  // a typo is not ignored
  CHECK(refusal(json{{"prompt", "a"}, {"logit_bias", {{"5", 1}}}}).find("'logit_bias'") != std::string::npos);
  CHECK(refusal(json{{"prompt", "a"}, {"suffix", "x"}}).find("'suffix'") != std::string::npos);
  CHECK(refusal(json{{"prompt", "a"}, {"model", "m"}, {"user", "u"}, {"logit_bias", json::object()}}).empty());
  CHECK(refusal(json{{"messages", json::array({json{{"role", "user"}, {"content", "x"}}})}, {"echo", true}}, true) ==
        "unknown field 'echo'");
  const json hi = json::array({json{{"role", "user"}, {"content", "x"}}});
  CHECK(refusal(json{{"messages", hi}, {"top_logprobs", 2}}, true) == "'top_logprobs' requires 'logprobs': true");
  CHECK(refusal(json{{"messages", hi}, {"logprobs", false}, {"top_logprobs", 0}}, true) ==
        "'top_logprobs' requires 'logprobs': true");
  CHECK(refusal(json{{"messages", hi}, {"logprobs", true}, {"top_logprobs", 21}}, true) ==
        "'top_logprobs' = 21 is outside [0, 20]");
  CHECK(refusal(json{{"messages", hi}, {"logprobs", 2}}, true) == "'logprobs' must be true or false");
  CHECK(refusal(json{{"messages", hi}, {"logprobs", true}, {"top_logprobs", 20}}, true).empty());
  CHECK(refusal(json{{"messages", json::array()}}, true).find("'messages'") != std::string::npos);
  CHECK(refusal(json{{"messages", json::array({json{{"content", "x"}}})}}, true).find("'role'") != std::string::npos);
  CHECK(refusal(json{{"messages", json::array({json{{"role", "user"}}})}}, true).find("needs a 'content'") != std::string::npos);
  CHECK(refusal(json{{"messages", json::array({json{{"role", "user"}, {"content", nullptr}}})}}, true)
            .find("needs a 'content'") != std::string::npos);
  test::ByteTokenizer tok;
  CHECK_THROWS_AS(parse_chat(json{{"messages", json::array({json{{"role", "user"}, {"content", "x"}}})}}, tok, nullptr, limits()),
                  ApiError);
  // fuzz_openai_api: a content part whose "type" is not a string (tests/fixtures/fuzz/openai_chat_part_type_array.json)
  {
    std::ifstream f(std::string(TPSHARD_FIXTURES_DIR) + "/fuzz/openai_chat_part_type_array.json");
    const json found = json::parse(f);
    CHECK(refusal(found, true) == "message content parts must be {\"type\": \"text\", \"text\": ...}");
    CHECK(refusal(json{{"messages", json::array({json{{"role", "user"}, {"content", json::array({json{{"type", 5}, {"text", "x"}}})}}})}}, true)
              .find("content parts") != std::string::npos);
  }
  CHECK(refusal(json{{"prompt", "a"}, {"stream_options", {{"include_usage", true}}}}) == "'stream_options' is only allowed with 'stream': true");
  CHECK(refusal(json{{"prompt", "a"}, {"stream", true}, {"stream_options", {{"continuous_usage_stats", true}}}})
            .find("'stream_options.continuous_usage_stats' is not supported") != std::string::npos);
  CHECK(refusal(json{{"prompt", "a"}, {"stream", true}, {"stream_options", {{"include_usage", 1}}}}) ==
        "'stream_options.include_usage' must be a boolean");
}

TEST_CASE("response bodies: text, finish_reason, usage, echo with logprobs (first token null), chat, stream chunks") {
  test::ByteTokenizer tok;
  ApiRequest r = parse_completion(json{{"prompt", "ab"}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 2}}, tok, limits());
  GenerationResult res;
  res.output_ids = {'c', 'd'};
  res.text = "cd";
  res.finish_reason = "length";
  const size_t prompt_len = r.prompts[0].prompt_ids.size();
  for (size_t k = 1; k < prompt_len; ++k) res.prompt_logprobs.push_back({r.prompts[0].prompt_ids[k], -0.5f, {{'x', -0.1f}}});
  res.logprobs = {{'c', -1.0f, {{'c', -1.0f}}}, {'d', -2.0f, {{'e', -0.2f}}}};
  res.text_tokens = 2;
  const json j = response_body(r, {res}, tok, "cmpl-7", 100, "m");
  CHECK(j["object"] == "text_completion");
  CHECK(j["id"] == "cmpl-7");
  CHECK(j["model"] == "m");
  CHECK(j["usage"]["prompt_tokens"] == prompt_len);
  CHECK(j["usage"]["completion_tokens"] == 2);
  const json& c = j["choices"][0];
  CHECK(c["text"] == tok.decode(r.prompts[0].prompt_ids, true) + "cd");
  CHECK(c["finish_reason"] == "length");
  const json& lp = c["logprobs"];
  REQUIRE(lp["token_logprobs"].size() == prompt_len + 2);
  CHECK(lp["token_logprobs"][0].is_null());
  CHECK(lp["top_logprobs"][0].is_null());
  CHECK(lp["token_logprobs"][1] == -0.5);
  CHECK(lp["token_logprobs"][prompt_len + 1] == -2.0);
  CHECK(lp["top_logprobs"][prompt_len + 1]["e"] == doctest::Approx(-0.2));
  CHECK(lp["tokens"][prompt_len] == "c");
  res.finish_reason = "eos";
  ApiRequest chat;
  chat.chat = true;
  chat.prompts = r.prompts;
  const json cj = response_body(chat, {res}, tok, "chatcmpl-1", 100, "m");
  CHECK(cj["object"] == "chat.completion");
  CHECK(cj["choices"][0]["message"]["role"] == "assistant");
  CHECK(cj["choices"][0]["message"]["content"] == "cd");
  CHECK(cj["choices"][0]["finish_reason"] == "stop");
  const std::string first = stream_event(chat, 0, "c", "", true, "chatcmpl-1", 100, "m");
  REQUIRE(first.rfind("data: ", 0) == 0);
  const json e = json::parse(first.substr(6));
  CHECK(e["object"] == "chat.completion.chunk");
  CHECK(e["choices"][0]["delta"]["role"] == "assistant");
  CHECK(e["choices"][0]["delta"]["content"] == "c");
  CHECK(e["choices"][0]["finish_reason"].is_null());
  const json last = json::parse(stream_event(r, 0, "", "stop", false, "cmpl-7", 100, "m").substr(6));
  CHECK(last["choices"][0]["finish_reason"] == "stop");
  // A cancelled request (client gone, drain timeout) says so, as vLLM does.
  const json aborted = json::parse(stream_event(r, 0, "", "abort", false, "cmpl-7", 100, "m").substr(6));
  CHECK(aborted["choices"][0]["finish_reason"] == "abort");
  CHECK(openai_finish_reason("eos") == "stop");
  CHECK(openai_finish_reason("abort") == "abort");
  CHECK(error_body(ApiError{400, "bad"})["error"]["message"] == "bad");

  // stream_options.include_usage: every chunk has "usage": null, a last chunk has no choices and the usage.
  ApiRequest su = parse_completion(json{{"prompt", "ab"}, {"stream", true}, {"stream_options", {{"include_usage", true}}}}, tok, limits());
  CHECK(su.stream_usage);
  CHECK(json::parse(stream_event(su, 0, "c", "", true, "cmpl-8", 100, "m").substr(6))["usage"].is_null());
  GenerationResult two;
  two.output_ids = {'c', 'd'};
  const json u = json::parse(stream_usage_event(su, {two}, "cmpl-8", 100, "m").substr(6));
  CHECK(u["choices"].empty());
  CHECK(u["usage"] == json{{"prompt_tokens", 3}, {"completion_tokens", 2}, {"total_tokens", 5}});
  CHECK(u["object"] == "text_completion");
  CHECK_FALSE(json::parse(stream_event(r, 0, "c", "", true, "cmpl-7", 100, "m").substr(6)).contains("usage"));
}

TEST_CASE("chat logprobs: logprobs true with top_logprobs asks for log-probabilities with that many alternatives") {
  test::ByteTokenizer tok;
  const ChatTemplate t = chatml_template();
  const json hi = json::array({json{{"role", "user"}, {"content", "hi"}}});
  const ApiRequest two = parse_chat(json{{"messages", hi}, {"logprobs", true}, {"top_logprobs", 2}, {"n", 2}}, tok, &t, limits());
  CHECK(two.logprobs == 2);
  REQUIRE(two.prompts.size() == 2);
  CHECK(two.prompts[1].params.logprobs == 2);
  CHECK(two.prompts[1].params.prompt_logprobs == -1);
  CHECK(parse_chat(json{{"messages", hi}, {"logprobs", true}}, tok, &t, limits()).prompts[0].params.logprobs == 0);
  CHECK(parse_chat(json{{"messages", hi}, {"logprobs", false}}, tok, &t, limits()).prompts[0].params.logprobs == -1);
}

TEST_CASE("ChoiceLogprobs: parts taken as the result grows concatenate to the whole; only text_tokens are reported") {
  test::ByteTokenizer tok;
  const std::vector<int32_t> prompt = {test::ByteTokenizer::kBos, 'a', 'b'};
  GenerationResult res;
  res.prompt_logprobs = {{'a', -0.5f, {{'a', -0.5f}, {'x', -1.5f}}}, {'b', -0.25f, {{'b', -0.25f}, {'x', -2.5f}}}};
  res.output_ids = {'c', 0xC3, 0xA9, 'd'};  // "c", then "é" in two byte tokens, then "d"
  for (size_t k = 0; k < res.output_ids.size(); ++k)
    res.logprobs.push_back({res.output_ids[k], -1.0f - static_cast<float>(k), {{res.output_ids[k], -1.0f - static_cast<float>(k)}, {'z', -9.0f}}});
  res.text_tokens = 3;  // 'd' began a stop string: not reported
  ChoiceLogprobs whole(tok, prompt, true, 2, false);
  whole.add(res);
  const json all = whole.take();
  REQUIRE(all["tokens"].size() == 6);
  CHECK(all["tokens"][3] == "c");
  CHECK(all["token_logprobs"][0].is_null());
  CHECK(all["token_logprobs"][2] == -0.25);
  CHECK(all["token_logprobs"][5] == -3.0);
  CHECK(all["top_logprobs"][1] == json{{"a", -0.5}, {"x", -1.5}});
  // offsets index the returned text "abc\xC3\xA9": BOS is shown as "<s>" but adds nothing to it
  CHECK(all["tokens"][0] == "<s>");
  CHECK(all["text_offset"] == json::array({0, 0, 1, 2, 3, 4}));

  // The same in parts: the prompt with the first output token, then nothing new, then the rest.
  ChoiceLogprobs parts(tok, prompt, true, 2, false);
  GenerationResult so_far = res;
  so_far.text_tokens = 1;
  parts.add(so_far);
  json joined = parts.take();
  CHECK(joined["tokens"].size() == 4);
  parts.add(so_far);
  CHECK(parts.take()["tokens"].empty());
  parts.add(res);
  const json rest = parts.take();
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
    for (const json& v : rest[key]) joined[key].push_back(v);
  CHECK(joined == all);

  // Alternatives are listed most likely first (not by their strings), in the printed object too.
  GenerationResult ranked;
  ranked.output_ids = {'b'};
  ranked.logprobs = {{'b', -0.1f, {{'z', -0.05f}, {'b', -0.1f}, {'a', -4.0f}}}};
  ranked.text_tokens = 1;
  ChoiceLogprobs order(tok, prompt, false, 3, false);
  order.add(ranked);
  CHECK(order.take()["top_logprobs"][0].dump() == R"({"z":-0.05000000074505806,"b":-0.10000000149011612,"a":-4.0})");
  // The chosen token is always listed (OpenAI: up to logprobs + 1 entries): with logprobs 1 after the
  // more likely 'z', and alone with logprobs 0.
  ChoiceLogprobs one(tok, prompt, false, 1, false);
  one.add(ranked);
  CHECK(one.take()["top_logprobs"][0].dump() == R"({"z":-0.05000000074505806,"b":-0.10000000149011612})");
  ChoiceLogprobs zero(tok, prompt, false, 0, false);
  zero.add(ranked);
  CHECK(zero.take()["top_logprobs"][0] == json{{"b", -0.1f}});

  // Chat: the generated tokens only, with their bytes and a list of alternatives.
  ChoiceLogprobs chat(tok, prompt, false, 1, true);
  chat.add(res);
  const json c = chat.take();
  CHECK(c["refusal"].is_null());
  REQUIRE(c["content"].size() == 3);
  CHECK(c["content"][0] == json{{"token", "c"}, {"logprob", -1.0}, {"bytes", {99}},
                                 {"top_logprobs", json::array({json{{"token", "c"}, {"logprob", -1.0}, {"bytes", {99}}}})}});
  CHECK(c["content"][1]["bytes"] == json::array({0xC3}));
  CHECK(c["content"][2]["bytes"] == json::array({0xA9}));
  CHECK(c["content"][2]["logprob"] == -3.0);
}
