// test_server.cpp: `tprun serve` as a user runs it (a process, tp 2 on the CPU backend, 3 kv_cache slots)
// against what the library computes in-process for the same model: greedy and seeded completions of
// concurrent requests, streaming, echo + logprobs (lm-evaluation-harness loglikelihood), streamed and chat
// logprobs, chat with the model's template, tokenize / detokenize, and bad requests that leave the server
// serving.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "runtime/chat_template.h"
#include "runtime/generate.h"
#include "runtime/prompt_scores.h"
#include "runtime/rendezvous.h"
#include "runtime/session.h"

extern char** environ;

using namespace tpshard;
using json = nlohmann::json;

namespace {

/// stories260K converted at tp 1 and 2, with SmolLM2's ChatML template as its chat template.
std::string model_dir() {
  static const std::string dir = [] {
    const std::string out = std::string(TPSHARD_TEST_OUT_DIR) + "/stories260K";
    std::filesystem::create_directories(TPSHARD_TEST_OUT_DIR);
    const std::string cmd = std::string(TPSHARD_BIN_DIR) + "/tpshard convert " + TPSHARD_FIXTURES_DIR +
                            "/stories260K -o " + out + " --tp 1,2 --force -q";
    REQUIRE(std::system(cmd.c_str()) == 0);
    std::ifstream cfg(std::string(TPSHARD_FIXTURES_DIR) + "/smollm2/tokenizer_config.json");
    const json c = json::parse(cfg);
    std::ofstream(out + "/chat_template.jinja") << c["chat_template"].get<std::string>();
    return out;
  }();
  return dir;
}

/// Starts `tprun serve` (tp 2 on the CPU backend, 3 kv_cache slots, --idle-exit idle_exit; extra: more serve
/// options) on `port`, its stdout and stderr in `log`.
pid_t spawn_serve(int port, const std::string& extra, const std::string& log, int idle_exit = 60) {
  const std::string cmd = "exec " + std::string(TPSHARD_BIN_DIR) + "/tprun " + model_dir() +
                          " --tp 2 --device cpu --threads 1 --max-batch 3 serve --port " + std::to_string(port) +
                          " --idle-exit " + std::to_string(idle_exit) + " " + extra + " > " + log + " 2>&1";
  const char* argv[] = {"sh", "-c", cmd.c_str(), nullptr};
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) == 0);
  return pid;
}

/// The wait status of `pid` once it exits, or -1 when it still runs after `seconds` (then it is killed).
int wait_exit(pid_t pid, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

/// A `tprun serve` process (extra: more serve options), killed when the test ends.
class ServerProcess {
 public:
  explicit ServerProcess(const std::string& extra = "", int idle_exit = 60)
      : port_(find_free_port()), log_(std::string(TPSHARD_TEST_OUT_DIR) + "/serve" + std::to_string(port_) + ".log") {
    pid_ = spawn_serve(port_, extra, log_, idle_exit);
    httplib::Client c("127.0.0.1", port_);
    for (int i = 0; i < 300; ++i) {
      if (auto r = c.Get("/health"); r && r->status == 200) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    FAIL("tprun serve did not answer /health within 30 s");
  }
  ~ServerProcess() {
    if (pid_ == 0) return;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  int port() const { return port_; }
  const std::string& log_path() const { return log_; }
  /// The wait status once it exits by itself (-1: still running after `seconds`, then killed).
  int wait(double seconds) {
    const int status = wait_exit(pid_, seconds);
    pid_ = 0;
    return status;
  }

 private:
  int port_;
  std::string log_;
  pid_t pid_ = 0;
};

std::string serve_finish(const std::string& ours) { return ours == "length" ? "length" : "stop"; }

json post(int port, const std::string& path, const json& body, int* status = nullptr) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  auto r = c.Post(path.c_str(), body.dump(), "application/json");
  REQUIRE(r);
  if (status) *status = r->status;
  return json::parse(r->body);
}

json health(int port) {
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get("/health");
  REQUIRE(r);
  return json::parse(r->body);
}

/// The server-sent events of a streamed response body, without the final [DONE].
std::vector<json> stream_events(const std::string& body) {
  std::vector<json> events;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    const std::string data = body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") break;
    events.push_back(json::parse(data));
  }
  return events;
}

SessionOptions session(int tp) {
  SessionOptions o;
  o.model_dir = model_dir();
  o.tp_size = tp;
  o.device = Device::Cpu;
  o.max_batch = 3;
  o.quiet = true;
  o.cpu_threads = 1;
  return o;
}

/// The greedy reference of the chat tests: "Tell me a story" rendered by the fixture's template (its ids in
/// *ids), 10 new tokens.
GenerationResult greedy_chat(RankContext& ctx, std::vector<int32_t>* ids) {
  *ids = ctx.tokenizer->encode(apply_chat_template(model_dir(), {{"user", "Tell me a story"}}, true), false);
  GenerationRequest r;
  r.id = "0";
  r.prompt_ids = *ids;
  r.params.max_new_tokens = 10;
  r.params.temperature = 0;
  return generate(*ctx.runner, *ctx.tokenizer, {r})[0];
}

}  // namespace

TEST_CASE("tprun serve: concurrent completions, streaming, echo + logprobs, chat and bad requests against the library") {
  const std::vector<std::string> prompts = {"Once upon a time", "The cat", "Lily and Ben went", "One day", "A big dog",
                                            "Tom had a red ball"};
  // What the library gives for the same requests (ids "0": the server's per-prompt id, which keys the RNG).
  std::vector<GenerationResult> greedy, sampled;
  std::vector<SequenceScores> scores;
  std::vector<int32_t> chat_ids;
  GenerationResult chat_result;
  run_on_ranks(session(1), [&](RankContext& ctx) {
    for (const bool sample : {false, true})
      for (const std::string& p : prompts) {
        GenerationRequest r;
        r.id = "0";
        r.prompt_ids = ctx.tokenizer->encode(p, true);
        r.params.max_new_tokens = 12;
        r.params.temperature = sample ? 0.8f : 0.0f;
        r.params.seed = 5;
        (sample ? sampled : greedy).push_back(generate(*ctx.runner, *ctx.tokenizer, {r})[0]);
      }
    scores = score_sequences(*ctx.runner, {ctx.tokenizer->encode(prompts[0] + " there was", true)}, 0);
    chat_result = greedy_chat(ctx, &chat_ids);
  });

  ServerProcess server;
  const int port = server.port();
  // Twelve requests at once through 3 kv_cache slots: continuous batching, results as if alone.
  std::vector<json> got(2 * prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < got.size(); ++i)
    clients.emplace_back([&, i] {
      const bool sample = i >= prompts.size();
      got[i] = post(port, "/v1/completions",
                    {{"prompt", prompts[i % prompts.size()]}, {"max_tokens", 12}, {"temperature", sample ? 0.8 : 0.0}, {"seed", 5}});
    });
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    const GenerationResult& want = i < prompts.size() ? greedy[i] : sampled[i - prompts.size()];
    REQUIRE(got[i]["choices"].size() == 1);
    CHECK(got[i]["choices"][0]["text"] == want.text);
    CHECK(got[i]["choices"][0]["finish_reason"] == serve_finish(want.finish_reason));
    CHECK(got[i]["usage"]["completion_tokens"] == want.output_ids.size());
  }

  // Streaming: the events' text pieces add up to the same text, then [DONE].
  {
    httplib::Client c("127.0.0.1", port);
    std::string body;
    auto r = c.Post("/v1/completions", json{{"prompt", prompts[0]}, {"max_tokens", 12}, {"temperature", 0}, {"stream", true}}.dump(),
                    "application/json");
    REQUIRE(r);
    body = r->body;
    std::string text;
    size_t at = 0;
    int events = 0;
    while ((at = body.find("data: ", at)) != std::string::npos) {
      const size_t end = body.find("\n\n", at);
      const std::string data = body.substr(at + 6, end - at - 6);
      at = end;
      if (data == "[DONE]") break;
      text += json::parse(data)["choices"][0]["text"].get<std::string>();
      ++events;
    }
    CHECK(events >= 2);
    CHECK(text == greedy[0].text);
    CHECK(body.find("data: [DONE]") != std::string::npos);
  }

  // lm-evaluation-harness loglikelihood: echo, logprobs, max_tokens 0 -> the prompt's token log-probabilities.
  {
    const json r = post(port, "/v1/completions",
                        {{"prompt", prompts[0] + " there was"}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 1}, {"temperature", 0}});
    const json& lp = r["choices"][0]["logprobs"]["token_logprobs"];
    REQUIRE(lp.size() == scores[0].tokens.size() + 1);
    CHECK(lp[0].is_null());
    for (size_t k = 0; k < scores[0].tokens.size(); ++k) CHECK(std::abs(lp[k + 1].get<double>() - scores[0].tokens[k].logprob) <= 1e-5);
    CHECK(r["choices"][0]["logprobs"]["top_logprobs"][1].size() == 1);
  }

  // Chat with the model's template.
  {
    const json r = post(port, "/v1/chat/completions",
                        {{"messages", json::array({json{{"role", "user"}, {"content", "Tell me a story"}}})}, {"max_tokens", 10}, {"temperature", 0}});
    CHECK(r["object"] == "chat.completion");
    CHECK(r["choices"][0]["message"]["content"] == chat_result.text);
    CHECK(r["usage"]["prompt_tokens"] == chat_ids.size());
  }

  // tokenize / detokenize, models.
  {
    const json t = post(port, "/tokenize", {{"prompt", prompts[2]}});
    const json d = post(port, "/detokenize", {{"tokens", t["tokens"]}});
    CHECK(d["prompt"].get<std::string>().find(prompts[2]) != std::string::npos);
    int st = 0;
    const json wrong = post(port, "/tokenize", {{"prompt", "x"}, {"add_special_tokens", "yes"}}, &st);
    CHECK(st == 400);
    CHECK(wrong["error"]["message"] == "'add_special_tokens' must be true or false");
    httplib::Client c("127.0.0.1", port);
    auto m = c.Get("/v1/models");
    REQUIRE(m);
    CHECK(json::parse(m->body)["data"][0]["id"] == "stories260K");
  }

  // Bad requests: 400 with an OpenAI error object; the server keeps serving.
  {
    httplib::Client c("127.0.0.1", port);
    auto bad = c.Post("/v1/completions", "{not json", "application/json");
    REQUIRE(bad);
    CHECK(bad->status == 400);
    CHECK(json::parse(bad->body)["error"]["message"].get<std::string>().find(
              "the body is not valid JSON: parse error at line 1, column 3: syntax error while parsing object key - "
              "invalid literal; expected string literal") == 0);
    // a byte that is not UTF-8 inside a string: named with its position, the body's bytes not echoed
    auto latin1 = c.Post("/v1/completions", std::string("{\"prompt\": \"a\xff b\"}"), "application/json");
    REQUIRE(latin1);
    CHECK(latin1->status == 400);
    const std::string why = json::parse(latin1->body)["error"]["message"];
    CHECK(why.find("column 14") != std::string::npos);
    CHECK(why.find("UTF-8") != std::string::npos);
    auto huge = c.Post("/v1/completions", "{\"prompt\": \"a\", \"temperature\": 1e400}", "application/json");
    REQUIRE(huge);
    CHECK(huge->status == 400);
    CHECK(json::parse(huge->body)["error"]["message"].get<std::string>().find("the body is not valid JSON: number overflow") == 0);
    auto nowhere = c.Post("/v1/complete", "{}", "application/json");  // no such endpoint: 404 with the error object
    REQUIRE(nowhere);
    CHECK(nowhere->status == 404);
    CHECK(json::parse(nowhere->body)["error"]["message"].get<std::string>().find("no endpoint POST /v1/complete") == 0);
    int status = 0;
    const json too_long = post(port, "/v1/completions", {{"prompt", json::array({1, 2})}, {"max_tokens", 100000}}, &status);
    CHECK(status == 400);
    CHECK(too_long["error"]["message"].get<std::string>().find("max_tokens 100000") != std::string::npos);
    // a request naming another model: 404 naming both names; naming this one: served
    const json other = post(port, "/v1/completions", {{"model", "gpt-4"}, {"prompt", prompts[1]}, {"max_tokens", 2}}, &status);
    CHECK(status == 404);
    CHECK(other["error"]["type"] == "not_found_error");
    CHECK(other["error"]["message"].get<std::string>().find("'gpt-4' does not exist: this server serves 'stories260K'") !=
          std::string::npos);
    const json again = post(port, "/v1/completions",
                            {{"model", "stories260K"}, {"prompt", prompts[1]}, {"max_tokens", 12}, {"temperature", 0}}, &status);
    CHECK(status == 200);
    CHECK(again["choices"][0]["text"] == greedy[1].text);
  }
}

TEST_CASE("tprun serve --api-key: 401 without the key (health stays open); --max-queued: 429 beyond it, the rest served") {
  ServerProcess server("--api-key s3cret --max-queued 2");
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(60, 0);
  // 400 tokens each (no EOS): long enough that the first two are still running when the others arrive.
  const std::string body =
      json{{"prompt", "Once upon a time"}, {"max_tokens", 400}, {"temperature", 0}, {"ignore_eos", true}}.dump();
  auto no_key = c.Post("/v1/completions", body, "application/json");
  REQUIRE(no_key);
  CHECK(no_key->status == 401);
  CHECK(json::parse(no_key->body)["error"]["message"].get<std::string>().find("API key") != std::string::npos);
  auto health = c.Get("/health");
  REQUIRE(health);
  CHECK(health->status == 200);
  const httplib::Headers auth = {{"Authorization", "Bearer s3cret"}};
  auto ok = c.Post("/v1/completions", auth, body, "application/json");
  REQUIRE(ok);
  CHECK(ok->status == 200);
  // Eight at once with room for two: some get 429, every other one a full answer.
  std::vector<int> status(8);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < status.size(); ++i)
    clients.emplace_back([&, i] {
      httplib::Client ci("127.0.0.1", server.port());
      ci.set_read_timeout(60, 0);
      auto r = ci.Post("/v1/completions", auth, body, "application/json");
      status[i] = r ? r->status : -1;
      if (r && r->status == 200) CHECK(json::parse(r->body)["choices"][0]["text"] == json::parse(ok->body)["choices"][0]["text"]);
    });
  for (auto& t : clients) t.join();
  const int refused = static_cast<int>(std::count(status.begin(), status.end(), 429));
  const int served = static_cast<int>(std::count(status.begin(), status.end(), 200));
  CHECK(refused + served == 8);
  CHECK(refused >= 1);
  CHECK(served >= 2);
  // The slots of the refused and the finished requests are free again.
  auto after = c.Post("/v1/completions", auth, body, "application/json");
  REQUIRE(after);
  CHECK(after->status == 200);
}

TEST_CASE("tprun serve --chat-template FILE: chat requests are rendered with the file, not the model's template") {
  const std::string file = std::string(TPSHARD_FIXTURES_DIR) + "/chat_templates/tinyllama.jinja";
  const std::vector<ChatMessage> messages = {{"system", "Be kind."}, {"user", "Tell me a story"}};
  const std::string rendered = render_chat(load_chat_template(model_dir(), file), messages, true);
  CHECK(rendered == "<|system|>\nBe kind.</s>\n<|user|>\nTell me a story</s>\n<|assistant|>\n");
  std::vector<int32_t> ids, model_ids;
  run_on_ranks(session(1), [&](RankContext& ctx) {
    ids = ctx.tokenizer->encode(rendered, false);
    model_ids = ctx.tokenizer->encode(apply_chat_template(model_dir(), messages, true), false);
  });
  REQUIRE(ids.size() != model_ids.size());  // the two templates give prompts of different lengths
  ServerProcess server("--chat-template " + file);
  const json r = post(server.port(), "/v1/chat/completions",
                      json{{"messages", json::array({json{{"role", "system"}, {"content", "Be kind."}},
                                                     json{{"role", "user"}, {"content", "Tell me a story"}}})},
                           {"max_tokens", 1}, {"temperature", 0}});
  CHECK(r["usage"]["prompt_tokens"] == ids.size());
}

TEST_CASE("n > 1: each choice is its own sequence; greedy choices equal n = 1, sampled choice c equals seed + c") {
  const std::vector<std::string> prompts = {"Once upon a time", "The cat"};
  // Library results (id: the prompt's index in the request, the RNG key of its every choice): greedy, and
  // seeds 7 and 8.
  std::vector<GenerationResult> greedy;
  std::vector<std::vector<GenerationResult>> sampled(prompts.size());  // [prompt][seed - 7]
  run_on_ranks(session(1), [&](RankContext& ctx) {
    for (size_t p = 0; p < prompts.size(); ++p)
      for (const int seed : {-1, 7, 8}) {
        GenerationRequest r;
        r.id = std::to_string(p);
        r.prompt_ids = ctx.tokenizer->encode(prompts[p], true);
        r.params.max_new_tokens = 12;
        r.params.temperature = seed < 0 ? 0.0f : 0.9f;
        r.params.seed = seed < 0 ? 0 : static_cast<uint64_t>(seed);
        const GenerationResult g = generate(*ctx.runner, *ctx.tokenizer, {r})[0];
        if (seed < 0) greedy.push_back(g);
        else sampled[p].push_back(g);
      }
  });
  REQUIRE(sampled[0][0].text != sampled[0][1].text);  // the two seeds differ, so the checks below can tell them apart

  ServerProcess server;
  const int port = server.port();
  const json one = post(port, "/v1/completions", {{"prompt", prompts[0]}, {"max_tokens", 12}, {"temperature", 0}});
  const json two = post(port, "/v1/completions", {{"prompt", prompts[0]}, {"max_tokens", 12}, {"temperature", 0}, {"n", 2}});
  REQUIRE(two["choices"].size() == 2);
  CHECK(one["choices"][0]["text"] == greedy[0].text);
  for (int c = 0; c < 2; ++c) {
    CHECK(two["choices"][c]["index"] == c);
    CHECK(two["choices"][c]["text"] == greedy[0].text);
  }
  CHECK(two["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"]);  // the prompt counts once
  CHECK(two["usage"]["completion_tokens"] == 2 * one["usage"]["completion_tokens"].get<int>());

  // Sampled: n = 2 with seed 7 gives the n = 1 answers of seeds 7 and 8.
  const json body = {{"prompt", prompts[0]}, {"max_tokens", 12}, {"temperature", 0.9}, {"seed", 7}};
  json body2 = body;
  body2["n"] = 2;
  const json s2 = post(port, "/v1/completions", body2);
  json b7 = body, b8 = body;
  b8["seed"] = 8;
  const json s7 = post(port, "/v1/completions", b7), s8 = post(port, "/v1/completions", b8);
  REQUIRE(s2["choices"].size() == 2);
  CHECK(s2["choices"][0]["text"] == s7["choices"][0]["text"]);
  CHECK(s2["choices"][1]["text"] == s8["choices"][0]["text"]);
  CHECK(s7["choices"][0]["text"] == sampled[0][0].text);
  CHECK(s8["choices"][0]["text"] == sampled[0][1].text);
  CHECK(s2["usage"]["completion_tokens"] == sampled[0][0].output_ids.size() + sampled[0][1].output_ids.size());

  // A list of prompts: choice index = prompt_index * n + c, streamed and not; prompt p's choice c is what
  // the same list with n = 1 and seed 7 + c gives it.
  json list = body2;
  list["prompt"] = prompts;
  const json l = post(port, "/v1/completions", list);
  REQUIRE(l["choices"].size() == 4);
  for (size_t k = 0; k < 4; ++k) {
    CAPTURE(k);
    CHECK(l["choices"][k]["index"] == k);
    CHECK(l["choices"][k]["text"] == sampled[k / 2][k % 2].text);
  }
  list["stream"] = true;
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  auto r = c.Post("/v1/completions", list.dump(), "application/json");
  REQUIRE(r);
  CHECK(r->body.find("data: [DONE]") != std::string::npos);
  std::map<int, std::string> text;
  std::map<int, int> finished;
  for (const json& e : stream_events(r->body)) {
    REQUIRE(e["choices"].size() == 1);
    const int index = e["choices"][0]["index"].get<int>();
    text[index] += e["choices"][0]["text"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) ++finished[index];
  }
  REQUIRE(text.size() == 4);
  for (int k = 0; k < 4; ++k) {
    CAPTURE(k);
    CHECK(text[k] == sampled[k / 2][k % 2].text);
    CHECK(finished[k] == 1);
  }

  // Chat: choice 1 of n = 2 equals a one-choice request with seed + 1.
  const json messages = json::array({json{{"role", "user"}, {"content", "Tell me a story"}}});
  const json chat2 = post(port, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 10}, {"temperature", 0.9}, {"seed", 3}, {"n", 2}});
  const json chat4 = post(port, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 10}, {"temperature", 0.9}, {"seed", 4}});
  REQUIRE(chat2["choices"].size() == 2);
  CHECK(chat2["choices"][1]["index"] == 1);
  CHECK(chat2["choices"][1]["message"]["content"] == chat4["choices"][0]["message"]["content"]);

  json list1 = list;
  list1.erase("n");
  list1.erase("stream");
  list1["seed"] = 8;
  const json l8 = post(port, "/v1/completions", list1);
  REQUIRE(l8["choices"].size() == 2);
  CHECK(l8["choices"][1]["text"] == l["choices"][3]["text"]);

  // Above 16 choices: 400, and the server goes on.
  int status = 0;
  const json refused = post(port, "/v1/completions", {{"prompt", prompts[0]}, {"n", 17}}, &status);
  CHECK(status == 400);
  CHECK(refused["error"]["message"] == "'n' = 17 is above 16 (choices per prompt)");
  // every slot is given back: the model loop frees the last ones (a shared prefix's) at its next step,
  // which may come just after the answers were sent
  json h = health(port);
  for (int i = 0; i < 100 && h["slots_in_use"] != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    h = health(port);
  }
  CHECK(h["slots_in_use"] == 0);
}

TEST_CASE("tprun serve: a non-streaming client that closes its connection while generating frees its slots") {
  ServerProcess server;
  const int port = server.port();
  // One request whose 16 choices of 500 tokens hold the 3 kv_cache slots for six rounds of 500 steps (about
  // 2 s unloaded, 20 times the server's 100 ms check of the connection).
  const std::string body =
      json{{"prompt", "Once upon a time"}, {"max_tokens", 500}, {"temperature", 0}, {"ignore_eos", true}, {"n", 16}}.dump();
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size()));
  // Wait until it runs in all three slots, then go away without reading the answer.
  json h;
  for (int i = 0; i < 300; ++i) {
    h = health(port);
    if (h["requests_running"] == 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE(h["requests_running"] == 3);
  CHECK(h["slots_in_use"].get<int>() >= 3);
  const uint64_t cancelled_before = h["requests_cancelled"].get<uint64_t>();
  close(fd);
  const auto closed = std::chrono::steady_clock::now();
  for (int i = 0; i < 500; ++i) {
    h = health(port);
    if (h["requests_in_flight"] == 0 && h["slots_in_use"] == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double freed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - closed).count();
  CAPTURE(freed_s);
  CHECK(h["requests_in_flight"] == 0);
  CHECK(h["slots_in_use"] == 0);
  CHECK(h["requests_cancelled"].get<uint64_t>() == cancelled_before + 1);  // cancelled, not run to its end
  // The server stays healthy: the next request is answered in full.
  int status = 0;
  const json after = post(port, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 5}, {"temperature", 0},
                                                    {"ignore_eos", true}}, &status);
  CHECK(status == 200);
  CHECK(after["usage"]["completion_tokens"] == 5);
  CHECK(after["choices"][0]["finish_reason"] == "length");
  CHECK(health(port)["status"] == "ok");
}

namespace {

/// Choice 0 of a streamed response: its text and its chunks' logprobs objects, in order.
struct StreamedChoice {
  std::string text;
  std::vector<std::string> texts;  ///< per chunk
  std::vector<json> logprobs;      ///< per chunk
};

StreamedChoice stream_choice(int port, const std::string& path, json body) {
  body["stream"] = true;
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  auto r = c.Post(path.c_str(), body.dump(), "application/json");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  StreamedChoice s;
  for (const json& e : stream_events(r->body)) {
    const json& choice = e["choices"][0];
    const std::string piece = choice.contains("text") ? choice["text"].get<std::string>()
                                                      : choice["delta"].value("content", std::string());
    s.text += piece;
    s.texts.push_back(piece);
    s.logprobs.push_back(choice["logprobs"]);
  }
  return s;
}

/// The completions logprobs objects of `parts` joined list by list.
json join_completion_logprobs(const std::vector<json>& parts) {
  json all = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  for (const json& p : parts) {
    REQUIRE(p.is_object());
    for (auto& [key, list] : all.items())
      for (const json& v : p.at(key)) list.push_back(v);
  }
  return all;
}

/// Two completions logprobs objects agree: the same tokens and offsets, log-probabilities within tol.
void check_same_logprobs(const json& a, const json& b, double tol) {
  REQUIRE(a["tokens"].size() == b["tokens"].size());
  CHECK(a["tokens"] == b["tokens"]);
  CHECK(a["text_offset"] == b["text_offset"]);
  for (size_t k = 0; k < a["tokens"].size(); ++k) {
    CAPTURE(k);
    REQUIRE(a["token_logprobs"][k].is_null() == b["token_logprobs"][k].is_null());
    if (!a["token_logprobs"][k].is_null())
      CHECK(std::abs(a["token_logprobs"][k].get<double>() - b["token_logprobs"][k].get<double>()) <= tol);
    const json& ta = a["top_logprobs"][k];
    const json& tb = b["top_logprobs"][k];
    REQUIRE(ta.size() == tb.size());
    for (auto& [tok, lp] : ta.items()) {
      REQUIRE(tb.contains(tok));
      CHECK(std::abs(lp.get<double>() - tb[tok].get<double>()) <= tol);
    }
  }
}

std::string joined_tokens(const json& lp) {
  std::string s;
  for (const json& t : lp["tokens"]) s += t.get<std::string>();
  return s;
}

}  // namespace

TEST_CASE("logprobs: streamed chunks add up to the response's (stop strings, echo); chat logprobs equal completions'") {
  const std::string prompt = "Once upon a time";
  const json messages = json::array({json{{"role", "user"}, {"content", "Tell me a story"}}});
  std::vector<int32_t> chat_ids;
  GenerationResult chat_result;
  run_on_ranks(session(1), [&](RankContext& ctx) {
    chat_result = greedy_chat(ctx, &chat_ids);
  });
  ServerProcess server;
  const int port = server.port();

  // Completions: each chunk carries the tokens of its text; the chunks' logprobs are the response's.
  const json body = {{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}, {"logprobs", 2}};
  const json whole = post(port, "/v1/completions", body);
  const json& lp = whole["choices"][0]["logprobs"];
  const std::string text = whole["choices"][0]["text"];
  REQUIRE(lp["tokens"].size() == 12);
  CHECK(joined_tokens(lp) == text);
  CHECK(lp["top_logprobs"][0].size() == 2);
  const StreamedChoice s = stream_choice(port, "/v1/completions", body);
  CHECK(s.text == text);
  int chunks_with_tokens = 0;
  for (size_t i = 0; i < s.texts.size(); ++i) {
    CAPTURE(i);
    CHECK(joined_tokens(s.logprobs[i]) == s.texts[i]);  // no stop string: a chunk's tokens spell its text
    chunks_with_tokens += s.logprobs[i]["tokens"].empty() ? 0 : 1;
  }
  CHECK(chunks_with_tokens >= 2);
  check_same_logprobs(join_completion_logprobs(s.logprobs), lp, 1e-6);

  // Stop strings: one that starts inside token k (token k is reported, the rest not), one that starts at
  // token k's first byte (held back while it might match: tokens from k on are not reported).
  for (const bool inside : {true, false}) {
    CAPTURE(inside);
    size_t k = 0, at = 0;
    std::string stop;
    for (k = 2; k + 2 < lp["tokens"].size(); ++k) {
      at = lp["text_offset"][k].get<size_t>() + (inside ? 1 : 0);
      if (lp["tokens"][k].get<std::string>().size() < 2 || at + 3 > text.size()) continue;
      stop = text.substr(at, 3);
      if (text.find(stop) == at) break;
    }
    REQUIRE(k + 2 < lp["tokens"].size());
    CAPTURE(stop);
    json with_stop = body;
    with_stop["stop"] = stop;
    const json cut = post(port, "/v1/completions", with_stop);
    CHECK(cut["choices"][0]["text"] == text.substr(0, at));
    CHECK(cut["choices"][0]["finish_reason"] == "stop");
    const json& cut_lp = cut["choices"][0]["logprobs"];
    CHECK(cut_lp["tokens"].size() == (inside ? k + 1 : k));
    for (size_t j = 0; j < cut_lp["tokens"].size(); ++j) CHECK(cut_lp["token_logprobs"][j] == lp["token_logprobs"][j]);
    const StreamedChoice cs = stream_choice(port, "/v1/completions", with_stop);
    CHECK(cs.text == text.substr(0, at));
    check_same_logprobs(join_completion_logprobs(cs.logprobs), cut_lp, 1e-6);
  }

  // echo: the prompt's tokens come first, in the first chunk, with the echoed text.
  const json echo = {{"prompt", prompt}, {"max_tokens", 5}, {"temperature", 0}, {"logprobs", 1}, {"echo", true}};
  const json echoed = post(port, "/v1/completions", echo);
  const StreamedChoice es = stream_choice(port, "/v1/completions", echo);
  CHECK(es.text == echoed["choices"][0]["text"]);
  CHECK(es.texts[0].rfind(prompt, 0) != std::string::npos);
  REQUIRE(es.logprobs[0]["token_logprobs"].size() >= 5);  // BOS + the prompt's 4 or more tokens
  CHECK(es.logprobs[0]["token_logprobs"][0].is_null());
  check_same_logprobs(join_completion_logprobs(es.logprobs), echoed["choices"][0]["logprobs"], 1e-6);
  // Each token's string stands in the returned text at its text_offset (BOS is shown as "<s>" and adds
  // nothing); SentencePiece's "▁Once" right after BOS reads "Once", as the text does.
  {
    const json& lp = echoed["choices"][0]["logprobs"];
    const std::string text = echoed["choices"][0]["text"];
    CHECK(lp["tokens"][0] == "<s>");
    CHECK(lp["text_offset"][0] == 0);
    CHECK(lp["tokens"][1] == "Once");
    std::string rebuilt;
    for (size_t i = 1; i < lp["tokens"].size(); ++i) {
      const std::string t = lp["tokens"][i];
      CHECK(lp["text_offset"][i] == rebuilt.size());
      rebuilt += t;
    }
    CHECK(rebuilt == text);
  }

  // Chat: streamed == not streamed, and both equal the completions logprobs of the rendered prompt
  // followed by the generated tokens (echo, max_tokens 0: every position prefilled at once).
  const json chat_body = {{"messages", messages}, {"max_tokens", 10}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 2}};
  const json chat = post(port, "/v1/chat/completions", chat_body);
  CHECK(chat["choices"][0]["message"]["content"] == chat_result.text);
  const json& content = chat["choices"][0]["logprobs"]["content"];
  CHECK(chat["choices"][0]["logprobs"]["refusal"].is_null());
  REQUIRE(content.size() == chat_result.output_ids.size());
  const StreamedChoice chat_s = stream_choice(port, "/v1/chat/completions", chat_body);
  CHECK(chat_s.text == chat_result.text);
  json streamed_content = json::array();
  for (const json& p : chat_s.logprobs)
    for (const json& e : p.at("content")) streamed_content.push_back(e);
  REQUIRE(streamed_content.size() == content.size());
  std::vector<int32_t> ids = chat_ids;
  ids.insert(ids.end(), chat_result.output_ids.begin(), chat_result.output_ids.end());
  const json scored = post(port, "/v1/completions", {{"prompt", ids}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 2}});
  const json& sl = scored["choices"][0]["logprobs"];
  REQUIRE(sl["tokens"].size() == ids.size());
  for (size_t k = 0; k < content.size(); ++k) {
    CAPTURE(k);
    const json& e = content[k];
    const size_t at = chat_ids.size() + k;
    CHECK(e["token"] == streamed_content[k]["token"]);
    CHECK(e["bytes"] == streamed_content[k]["bytes"]);
    CHECK(std::abs(e["logprob"].get<double>() - streamed_content[k]["logprob"].get<double>()) <= 1e-6);
    CHECK(e["token"] == sl["tokens"][at]);
    const std::string token = e["token"];
    std::vector<int> bytes;
    for (const unsigned char b : token) bytes.push_back(b);
    CHECK(e["bytes"] == json(bytes));
    CHECK(std::abs(e["logprob"].get<double>() - sl["token_logprobs"][at].get<double>()) <= 1e-5);
    REQUIRE(e["top_logprobs"].size() == 2);
    for (const json& t : e["top_logprobs"]) {
      REQUIRE(sl["top_logprobs"][at].contains(t["token"].get<std::string>()));
      CHECK(std::abs(t["logprob"].get<double>() - sl["top_logprobs"][at][t["token"].get<std::string>()].get<double>()) <= 1e-5);
    }
  }

  // top_logprobs needs logprobs true, and is at most 20.
  int status = 0;
  const json no_logprobs = post(port, "/v1/chat/completions", {{"messages", messages}, {"top_logprobs", 2}}, &status);
  CHECK(status == 400);
  CHECK(no_logprobs["error"]["message"] == "'top_logprobs' requires 'logprobs': true");
  const json too_many =
      post(port, "/v1/chat/completions", {{"messages", messages}, {"logprobs", true}, {"top_logprobs", 21}}, &status);
  CHECK(status == 400);
  CHECK(too_many["error"]["message"].get<std::string>().find("'top_logprobs' = 21") != std::string::npos);
}

TEST_CASE("a second tprun serve on a port a tprun server listens on fails to bind and exits non-zero; the first serves on") {
  ServerProcess first;
  const std::string log = std::string(TPSHARD_TEST_OUT_DIR) + "/serve_second" + std::to_string(first.port()) + ".log";
  // (--idle-exit 5: a second server that did bind stops by itself, with status 0.)
  const int status = wait_exit(spawn_serve(first.port(), "", log, 5), 120);
  const std::string out = read_file(log);
  CAPTURE(out);
  REQUIRE(status != -1);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) != 0);
  CHECK(out.find("cannot listen on 127.0.0.1:" + std::to_string(first.port()) + " (Address already in use)") !=
        std::string::npos);
  CHECK(out.find("serving") == std::string::npos);
  CHECK(health(first.port())["status"] == "ok");
}

TEST_CASE("tprun serve --idle-exit: exits 0 after that long without a request, saying why on stderr") {
  ServerProcess server("", 1);
  const int status = server.wait(60);
  const std::string out = read_file(server.log_path());
  CAPTURE(out);
  REQUIRE(status != -1);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(out.find("tprun: no request for 1 s (--idle-exit): exiting\n") != std::string::npos);
}

TEST_CASE("request bodies: JSON read whatever the Content-Type up to 64 MiB; over it 413 naming the limit; encodings") {
  ServerProcess server;
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(60, 0);
  const std::string request = json{{"prompt", "Once upon a time"}, {"max_tokens", 3}, {"temperature", 0}}.dump();
  const std::string padded = request + std::string(100000, ' ');  // 100 KB: above cpp-httplib's 8 KiB form limit
  std::string want;
  {
    auto r = c.Post("/v1/completions", request, "application/json");
    REQUIRE(r);
    REQUIRE(r->status == 200);
    want = json::parse(r->body)["choices"][0]["text"];
  }
  // curl -d's and Python urllib's default type, another type, none at all: read as JSON all the same.
  for (const char* type : {"application/x-www-form-urlencoded", "text/plain", ""}) {
    CAPTURE(type);
    httplib::Headers headers;
    if (*type) headers.emplace("Content-Type", type);
    auto r = c.Post("/v1/completions", headers, padded.data(), padded.size(), "");
    REQUIRE(r);
    CHECK(r->status == 200);
    CAPTURE(r->body);
    CHECK(json::parse(r->body)["choices"][0]["text"] == want);
    auto t = c.Post("/tokenize", json{{"prompt", "Once upon a time"}}.dump() + std::string(100000, ' '),
                    "application/x-www-form-urlencoded");
    REQUIRE(t);
    CHECK(t->status == 200);
  }
  // Above 64 MiB: 413 naming the limit, by Content-Length and in chunks (no Content-Length).
  const size_t limit = size_t{64} << 20;
  {
    const std::string huge(limit + 1, ' ');
    auto r = c.Post("/v1/completions", huge, "application/x-www-form-urlencoded");
    REQUIRE(r);
    CHECK(r->status == 413);
    CAPTURE(r->body);
    CHECK(json::parse(r->body)["error"]["message"].get<std::string>().find(std::to_string(limit) + " bytes") !=
          std::string::npos);
  }
  {
    httplib::Client chunked("127.0.0.1", server.port());
    auto r = chunked.Post("/v1/completions", [&](size_t offset, httplib::DataSink& sink) {
      static const std::string block(1 << 20, ' ');
      if (offset > limit) sink.done();
      else sink.write(block.data(), block.size());
      return true;
    }, "application/json");
    REQUIRE(r);
    CHECK(r->status == 413);
    CHECK(json::parse(r->body)["error"]["message"].get<std::string>().find(std::to_string(limit) + " bytes") !=
          std::string::npos);
  }
  // A body that is not what its Content-Encoding says, and an encoding the server does not undo: named.
  {
    httplib::Headers gz{{"Content-Encoding", "gzip"}};
    auto r = c.Post("/v1/completions", gz, request, "application/json");
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK(json::parse(r->body)["error"]["message"].get<std::string>().find("gzip") != std::string::npos);
    httplib::Headers zstd{{"Content-Encoding", "zstd"}};
    r = c.Post("/v1/completions", zstd, request, "application/json");
    REQUIRE(r);
    CHECK(r->status == 415);
    CHECK(json::parse(r->body)["error"]["message"].get<std::string>().find("'zstd'") != std::string::npos);
  }
  // Still serving on a new connection.
  httplib::Client again("127.0.0.1", server.port());
  auto r = again.Post("/v1/completions", request, "application/json");
  REQUIRE(r);
  CHECK(r->status == 200);
}

TEST_CASE("GET /v1/models/NAME (models.retrieve); 405 for another method on a known path, 404 for an unknown path") {
  ServerProcess server;
  httplib::Client c("127.0.0.1", server.port());
  auto list = c.Get("/v1/models");
  REQUIRE(list);
  const json model = json::parse(list->body)["data"][0];
  auto one = c.Get(("/v1/models/" + model["id"].get<std::string>()).c_str());
  REQUIRE(one);
  CHECK(one->status == 200);
  CHECK(json::parse(one->body) == model);
  auto other = c.Get("/v1/models/gpt-4o");
  REQUIRE(other);
  CHECK(other->status == 404);
  CHECK(json::parse(other->body)["error"]["type"] == "not_found_error");
  CHECK(json::parse(other->body)["error"]["message"].get<std::string>().find("'gpt-4o'") != std::string::npos);

  auto get = c.Get("/v1/completions");
  REQUIRE(get);
  CHECK(get->status == 405);
  CHECK(get->get_header_value("Allow") == "POST");
  CHECK(json::parse(get->body)["error"]["message"].get<std::string>().find("GET") != std::string::npos);
  auto post = c.Post("/v1/models", "{}", "application/json");
  REQUIRE(post);
  CHECK(post->status == 405);
  CHECK(post->get_header_value("Allow") == "GET");
  auto del = c.Delete("/v1/chat/completions");
  REQUIRE(del);
  CHECK(del->status == 405);
  auto unknown = c.Get("/v1/engines");
  REQUIRE(unknown);
  CHECK(unknown->status == 404);
  CHECK(json::parse(unknown->body)["error"]["message"].get<std::string>().find("no endpoint GET /v1/engines") == 0);
  auto unknown_post = c.Post("/v1/embeddings", "{}", "application/json");
  REQUIRE(unknown_post);
  CHECK(unknown_post->status == 404);
}

TEST_CASE("tprun serve --api-key with an empty key is a usage error (it would check nothing)") {
  const std::string log = std::string(TPSHARD_TEST_OUT_DIR) + "/serve_empty_key.log";
  const int status = wait_exit(spawn_serve(18999, "--api-key ''", log, 1), 60);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 2);
  CHECK(read_file(log).find("error: --api-key: an empty --api-key would check nothing: give a non-empty KEY") !=
        std::string::npos);
}
