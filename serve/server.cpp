// server.cpp: see server.h. Threads of the output rank: cpp-httplib's connection threads (parse, tokenize,
// queue a Job, wait for its events) and the rank's own thread (the model loop). A Job's state is guarded
// by the server mutex; the loop never blocks on a connection.
#include "serve/server.h"

#include <cerrno>
#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "format/error.h"
#include "runtime/host_exchange.h"
#include "runtime/request_json.h"
#include "serve/choice_logprobs.h"
#include "serve/connection_probe.h"
#include "serve/openai_api.h"

namespace tpshard::serve {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

/// The longest the model loop waits for a request while idle before the ranks meet again.
constexpr auto kIdlePoll = std::chrono::milliseconds(20);

/// How often the thread of a waiting non-streaming request checks that its client is still connected.
constexpr auto kClientPoll = std::chrono::milliseconds(100);

/// The largest request body, after Content-Encoding is undone; a larger one gets 413.
constexpr size_t kMaxBodyBytes = size_t{64} << 20;

/// The most HTTP connection threads (cpp-httplib's pool): --max-queued + 8, within [8, this].
constexpr int kMaxHttpThreads = 256;

/// SIGTERM / SIGINT received since the server started (only the output rank acts on them; see install_stop_handler).
std::atomic<int> g_stop_signals{0};
volatile sig_atomic_t g_last_stop_signal = 0;
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free counter");

extern "C" void on_stop_signal(int sig) {
  g_last_stop_signal = sig;
  g_stop_signals.fetch_add(1, std::memory_order_relaxed);
}

/// SIGTERM and SIGINT only count (async-signal-safe); the output rank's model loop polls the count at least
/// every kIdlePoll and drains. Every process of the replica installs it, so a rank process that gets the
/// signal (tprun's launcher forwards it to all) keeps running and follows the output rank's broadcast.
/// SA_RESTART: the host exchange's blocking socket calls are not interrupted.
void install_stop_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

/// One HTTP request in flight.
struct Job {
  ApiRequest req;
  std::string id;
  int64_t created = 0;
  size_t first_index = 0;                    ///< BatchGenerator index of prompt 0
  std::vector<GenerationResult> results;     ///< per prompt
  size_t remaining = 0;                      ///< prompts not finished
  std::deque<std::string> events;            ///< streaming: server-sent events not yet written
  std::vector<bool> started;                 ///< streaming: choice had its first chunk
  std::vector<ChoiceLogprobs> logprobs;      ///< streaming with logprobs: per choice, what its chunks sent
  std::string error;                         ///< set when the model loop refused it
  bool done = false;
  bool indexed = false;                      ///< first_index is set (the generator has its prompts)
  bool cancelled = false;                    ///< the client went away, or the drain timed out
  /// Its connection thread waits on it (with the server mutex) for events / done: one per job, so a token
  /// wakes only its own request's thread.
  std::condition_variable cv;
};

class Server {
 public:
  Server(RankContext& ctx, const ServeOptions& o) : ctx_(ctx), opts_(o) {
    model_name_ = o.model_name.empty() ? std::filesystem::path(ctx.model_dir).filename().string() : o.model_name;
    if (model_name_.empty()) model_name_ = std::filesystem::path(ctx.model_dir).parent_path().filename().string();
    limits_.max_seq_len = ctx.runner->max_seq_len();
    limits_.model_seq_limit = model_position_limit(ctx.runner->config());
    limits_.vocab_size = ctx.runner->config().vocab_size;
    if (o.generation_config == "auto") limits_.defaults = read_generation_defaults(ctx.model_dir);
  }

  void run();

 private:
  bool output() const { return ctx_.replica_ranks->rank() == 0; }
  void start_http();
  /// Registers the POST endpoint `path`: `handler` gets the body read by read_body.
  using BodyHandler = std::function<void(const httplib::Request&, const std::string& body, httplib::Response&)>;
  void post(const std::string& path, BodyHandler handler);
  /// Registers 405 for every method but `allowed` on `path` (a regular expression).
  void refuse_other_methods(const std::string& path, const std::string& allowed);
  void handle_generate(const httplib::Request& http, const std::string& body, httplib::Response& res, bool chat);
  /// Model loop (output rank): the step's broadcast {"add": the requests that arrived (moved to pending_),
  /// "cancel": generator indices of cancelled jobs}; waits up to kIdlePoll for a request when `wait`.
  /// "stop" once idle_exit_s passed without a request, or when draining and nothing is left in flight.
  std::string take_arrivals(bool wait);
  /// Output rank, under mu_: acts on new SIGTERM / SIGINT (the first starts the drain; one more, or the
  /// drain timeout, cancels every job left in flight).
  void poll_stop_signals();
  /// Under mu_: cancel `job` at the next step (its prompts' generator indices go into the broadcast).
  void cancel_job(const std::shared_ptr<Job>& job);
  void on_text(size_t index, const std::string& piece, const GenerationResult& so_far);
  void on_done(size_t index, const GenerationResult& r);
  /// Under mu_, streaming: the next chunk of choice `choice` of `job`: the text (after the echoed prompt in
  /// its first chunk), the logprobs of the tokens so_far gives out since its last chunk (when asked).
  void push_chunk(Job& job, size_t choice, const std::string& piece, const GenerationResult& so_far,
                  const std::string& finish_reason);
  void finish_job(const std::shared_ptr<Job>& job);

  RankContext& ctx_;
  ServeOptions opts_;
  std::string model_name_;
  ApiLimits limits_;
  std::unique_ptr<ChatTemplate> chat_template_;
  std::string chat_template_error_;
  httplib::Server http_;
  std::thread http_thread_;
  std::mutex mu_;
  std::condition_variable arrived_cv_;
  std::deque<std::shared_ptr<Job>> arrivals_;
  std::vector<std::shared_ptr<Job>> pending_;        ///< the jobs of the last broadcast, in its order
  std::map<size_t, std::shared_ptr<Job>> by_index_;  ///< BatchGenerator index -> its job (output rank)
  std::vector<size_t> finished_;                     ///< indices finished in the current step (every rank)
  std::atomic<uint64_t> next_id_{0};
  int in_flight_ = 0;  ///< jobs accepted and not done (under mu_)
  int open_streams_ = 0;  ///< streamed responses not yet ended on their connection (under mu_)
  std::vector<std::shared_ptr<Job>> to_cancel_;  ///< cancelled jobs whose indices are not broadcast yet (under mu_)
  /// What /health reports of the generator, copied by the model loop after each step (output rank).
  std::atomic<int> slots_in_use_{0}, running_{0}, waiting_{0};
  std::atomic<uint64_t> cancelled_count_{0};  ///< jobs cancelled (client gone, drain timeout) since start
  Clock::time_point last_request_ = Clock::now();
  int signals_seen_ = 0;                       ///< g_stop_signals already acted on (under mu_)
  std::atomic<bool> draining_{false};          ///< a stop signal came: new requests get 503
  bool aborting_ = false;                      ///< drain timed out or a second signal: cancel everything (under mu_)
  Clock::time_point drain_start_;
  int drained_ = 0;                            ///< requests in flight when the drain began
  uint64_t cancelled_at_drain_ = 0;            ///< cancelled_count_ then
};

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_body(e).dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

/// The methods cpp-httplib routes (any other gets its 400).
bool known_method(const std::string& m) {
  for (const char* k : {"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"})
    if (m == k) return true;
  return false;
}

/// The 404 message of a path no endpoint has.
std::string no_endpoint(const httplib::Request& q) {
  return "no endpoint " + q.method + " " + q.path +
         " (see GET /v1/models; POST /v1/completions, /v1/chat/completions)";
}

/// Reads the request body through cpp-httplib's content reader into *body, whatever its Content-Type (JSON
/// sent as application/x-www-form-urlencoded, curl -d's and urllib's default, or text/plain, or none), after
/// undoing its Content-Encoding (gzip, deflate, br), at most kMaxBodyBytes of it. Otherwise sends the error
/// (413 over the limit, 415 an unsupported Content-Encoding or a multipart body, 400 a body that cannot be
/// read or decoded) and returns false. (cpp-httplib reads a body for a regular handler itself and refuses a
/// form-encoded one above 8 KiB, CPPHTTPLIB_FORM_URL_ENCODED_PAYLOAD_MAX_LENGTH, fixed in its library.)
bool read_body(const httplib::Request& q, httplib::Response& res, const httplib::ContentReader& reader,
               std::string* body) {
  auto fail = [&res](int status, const std::string& message) {
    send_error(res, ApiError{status, message});
    return false;
  };
  const std::string encoding = q.get_header_value("Content-Encoding");
  const bool decoded = encoding == "gzip" || encoding == "deflate" || encoding == "br";  // cpp-httplib undoes these
  bool over = false;
  bool ok = false;
  if (q.is_multipart_form_data()) {  // read to its end (the connection then carries the next request), refused below
    size_t seen = 0;
    ok = reader([](const httplib::MultipartFormData&) { return true; }, [&](const char*, size_t n) {
      seen += n;
      over = seen > kMaxBodyBytes;
      return !over;
    });
  } else {
    ok = reader([&](const char* data, size_t n) {
      over = body->size() + n > kMaxBodyBytes;
      if (!over) body->append(data, n);
      return !over;
    });
  }
  // (cpp-httplib's own 413: a Content-Length above set_payload_max_length, the same limit.)
  if (over || res.status == 413)
    return fail(413, "the request body is larger than the server's limit of " + std::to_string(kMaxBodyBytes) +
                         " bytes (64 MiB)");
  if (!encoding.empty() && encoding != "identity" && !decoded)
    return fail(415, "Content-Encoding '" + encoding + "' is not supported: send the body as is, or with gzip, deflate or br");
  if (!ok && decoded) return fail(400, "the body is not valid " + encoding + " data (its Content-Encoding)");
  if (!ok)
    return fail(400, "the body could not be read to its end (connection closed, read timeout, or bad chunked encoding)");
  if (q.is_multipart_form_data())
    return fail(415, "a multipart/form-data body is not read: send the JSON object as the body (Content-Type: application/json)");
  return true;
}

void Server::post(const std::string& path, BodyHandler handler) {
  http_.Post(path, [handler = std::move(handler)](const httplib::Request& q, httplib::Response& res,
                                                  const httplib::ContentReader& reader) {
    std::string body;
    if (read_body(q, res, reader, &body)) handler(q, body, res);
  });
}

void Server::refuse_other_methods(const std::string& path, const std::string& allowed) {
  auto refuse = [allowed](const httplib::Request& q, httplib::Response& res) {
    res.set_header("Allow", allowed);
    send_error(res, ApiError{405, "method " + q.method + " is not allowed for " + q.path + " (use " + allowed + ")"});
  };
  // A refused request with a body is read first (so the connection can carry the next request).
  auto refuse_body = [refuse](const httplib::Request& q, httplib::Response& res, const httplib::ContentReader& reader) {
    std::string body;
    if (read_body(q, res, reader, &body)) refuse(q, res);
  };
  if (allowed != "GET") http_.Get(path, refuse);  // HEAD too
  if (allowed != "POST") http_.Post(path, refuse_body);
  http_.Put(path, refuse_body);
  http_.Patch(path, refuse_body);
  http_.Delete(path, refuse_body);
  http_.Options(path, refuse);
}

void Server::start_http() {
  try {
    chat_template_ = std::make_unique<ChatTemplate>(load_chat_template(ctx_.model_dir, opts_.chat_template_file));
  } catch (const Error& e) {
    chat_template_error_ = e.what();
  }
  // A larger Content-Length gets 413 before the body is read (read_body sends its error object).
  http_.set_payload_max_length(kMaxBodyBytes);
  if (!opts_.api_key.empty())
    http_.set_pre_routing_handler([this](const httplib::Request& q, httplib::Response& res) {
      if (q.path == "/health" || q.get_header_value("Authorization") == "Bearer " + opts_.api_key)
        return httplib::Server::HandlerResponse::Unhandled;
      send_error(res, ApiError{401, "missing or wrong API key (send \"Authorization: Bearer KEY\")"});
      return httplib::Server::HandlerResponse::Handled;
    });
  // More connection threads than cpp-httplib's default (8): each request in flight holds one while it waits
  // for the model. Connections beyond them wait for a free thread (neither counted nor refused).
  const size_t threads = static_cast<size_t>(std::clamp(opts_.max_queued + 8, 8, kMaxHttpThreads));
  http_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // What cpp-httplib answers itself gets the OpenAI error object too (it sends an empty body): 404 for a
  // GET to an unknown path, 400 for a method it does not know or a request it cannot parse.
  http_.set_error_handler([](const httplib::Request& q, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string what =
        res.status == 404   ? no_endpoint(q)
        : res.status == 400 && !q.method.empty() && !known_method(q.method)
            ? "method " + q.method + " is not supported (GET, POST)"
        : res.status == 400 ? std::string("the request line or headers cannot be parsed")
                            : "HTTP " + std::to_string(res.status) + " for " + q.method + " " + q.path;
    send_error(res, ApiError{res.status, what});
  });
  http_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    json h;
    {
      std::lock_guard<std::mutex> lock(mu_);
      h = {{"status", draining_ ? "draining" : "ok"},
           {"requests_in_flight", in_flight_},
           {"streams_open", open_streams_}};
    }
    h["requests_running"] = running_.load();
    h["requests_waiting"] = waiting_.load();
    h["slots_in_use"] = slots_in_use_.load();
    h["slots_total"] = ctx_.runner->max_batch();
    h["requests_cancelled"] = cancelled_count_.load();
    if (draining_) res.status = 503;  // load balancers: send new requests elsewhere
    res.set_content(h.dump(), "application/json");
  });
  const json model = {{"id", model_name_}, {"object", "model"}, {"created", 0}, {"owned_by", "tpshard"},
                      {"max_model_len", limits_.max_seq_len}};
  http_.Get("/v1/models", [model](const httplib::Request&, httplib::Response& res) {
    res.set_content(json{{"object", "list"}, {"data", json::array({model})}}.dump(), "application/json");
  });
  // The openai client's models.retrieve (the name may hold '/': "org/name").
  http_.Get(R"(/v1/models/(.+))", [this, model](const httplib::Request& q, httplib::Response& res) {
    if (q.matches[1].str() != model_name_)
      return send_error(res, ApiError{404, "the model '" + q.matches[1].str() + "' does not exist: this server serves '" +
                                               model_name_ + "'"});
    res.set_content(model.dump(), "application/json");
  });
  post("/tokenize", [this](const httplib::Request&, const std::string& text, httplib::Response& res) {
    try {
      const json body = parse_body(text);
      if (!body.is_object() || !body.contains("prompt") || !body["prompt"].is_string())
        throw ApiError{400, "'prompt' (a string) is required"};
      if (body.contains("add_special_tokens") && !body["add_special_tokens"].is_boolean())
        throw ApiError{400, "'add_special_tokens' must be true or false"};
      const bool special = body.value("add_special_tokens", true);
      const std::vector<int32_t> ids = ctx_.tokenizer->encode(body["prompt"].get<std::string>(), special);
      res.set_content(json{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", limits_.max_seq_len}}.dump(),
                      "application/json");
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  });
  post("/detokenize", [this](const httplib::Request&, const std::string& text, httplib::Response& res) {
    try {
      const json body = parse_body(text);
      if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array())
        throw ApiError{400, "'tokens' (a list of ids) is required"};
      std::vector<int32_t> ids;
      for (const json& t : body["tokens"]) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= ctx_.tokenizer->vocab_size())
          throw ApiError{400, "'tokens' must hold ids 0.." + std::to_string(ctx_.tokenizer->vocab_size() - 1)};
        ids.push_back(t.get<int32_t>());
      }
      res.set_content(json{{"prompt", ctx_.tokenizer->decode(ids, false)}}.dump(-1, ' ', false, json::error_handler_t::replace),
                      "application/json");
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  });
  post("/v1/completions",
       [this](const httplib::Request& q, const std::string& b, httplib::Response& r) { handle_generate(q, b, r, false); });
  post("/v1/chat/completions",
       [this](const httplib::Request& q, const std::string& b, httplib::Response& r) { handle_generate(q, b, r, true); });
  // A known path with another method: 405 (with Allow); any other path: 404 (a request with a body is read
  // first, so a large form-encoded one is not refused by cpp-httplib's 8 KiB form limit instead).
  for (const char* p : {"/health", "/v1/models", R"(/v1/models/(.+))"}) refuse_other_methods(p, "GET");
  for (const char* p : {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"})
    refuse_other_methods(p, "POST");
  auto unknown_body = [](const httplib::Request& q, httplib::Response& res, const httplib::ContentReader& reader) {
    std::string body;
    if (read_body(q, res, reader, &body)) send_error(res, ApiError{404, no_endpoint(q)});
  };
  http_.Post(".*", unknown_body);
  http_.Put(".*", unknown_body);
  http_.Patch(".*", unknown_body);
  http_.Delete(".*", unknown_body);
  // cpp-httplib (the Debian build) listens with a backlog of 5: a burst of clients overflows the accept
  // queue, and a connection dropped there is reset about a minute later. The listening socket is the
  // first that the socket-options hook sees; listen() again with the system's maximum raises the backlog.
  // SO_REUSEADDR only: a restarted server binds while the last one's connections are in TIME_WAIT.
  // cpp-httplib's default options set SO_REUSEPORT instead, which lets a second server bind the same port
  // and take part of its connections; without it that bind fails with EADDRINUSE.
  int listen_fd = -1;
  http_.set_socket_options([&listen_fd](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (listen_fd < 0) listen_fd = static_cast<int>(sock);
  });
  errno = 0;
  const bool bound = http_.bind_to_port(opts_.host.c_str(), opts_.port);
  const int bind_errno = errno;
  TPS_CHECK(bound,
            "serve: cannot listen on " + opts_.host + ":" + std::to_string(opts_.port) +
                (bind_errno != 0 ? std::string(" (") + std::strerror(bind_errno) + ")" : std::string()),
            "choose a free --port, or a --host address of this machine");
  if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
  http_thread_ = std::thread([this] { http_.listen_after_bind(); });
  std::fprintf(stderr, "tprun: serving %s on http://%s:%d (OpenAI API: /v1/completions, /v1/chat/completions)\n",
               model_name_.c_str(), opts_.host.c_str(), opts_.port);
}

void Server::handle_generate(const httplib::Request& http, const std::string& text, httplib::Response& res, bool chat) {
  auto job = std::make_shared<Job>();
  try {
    const json body = parse_body(text);
    // A request for another model is refused (as vLLM does), so that a client pointed at the wrong server
    // does not score this model under another name; a request without "model" is served.
    const auto model = body.find("model");
    if (model != body.end() && model->is_string() && model->get<std::string>() != model_name_)
      throw ApiError{404, "the model '" + model->get<std::string>() + "' does not exist: this server serves '" +
                              model_name_ + "' (GET /v1/models lists it)"};
    if (chat) {
      if (!chat_template_) throw ApiError{400, "this model's chat template cannot be used: " + chat_template_error_};
      job->req = parse_chat(body, *ctx_.tokenizer, chat_template_.get(), limits_);
    } else {
      job->req = parse_completion(body, *ctx_.tokenizer, limits_);
    }
  } catch (const ApiError& e) {
    send_error(res, e);
    return;
  }
  job->id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++);
  job->created = static_cast<int64_t>(std::time(nullptr));
  job->results.resize(job->req.prompts.size());
  job->remaining = job->req.prompts.size();
  job->started.assign(job->req.prompts.size(), false);
  if (job->req.stream && job->req.logprobs >= 0) {
    job->logprobs.reserve(job->req.prompts.size());
    for (const GenerationRequest& g : job->req.prompts)
      job->logprobs.emplace_back(*ctx_.tokenizer, g.prompt_ids, job->req.echo, job->req.logprobs, job->req.chat);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (draining_)
      return send_error(res, ApiError{503, "the server is shutting down (it got a stop signal): it finishes the "
                                           "requests in flight and accepts no new ones; retry on another server"});
    if (in_flight_ >= opts_.max_queued)
      return send_error(res, ApiError{429, "the server has " + std::to_string(in_flight_) +
                                               " requests in flight (--max-queued): retry later"});
    ++in_flight_;
    if (job->req.stream) ++open_streams_;
    arrivals_.push_back(job);
    last_request_ = Clock::now();
  }
  arrived_cv_.notify_one();
  if (!job->req.stream) {
    // Wait for the answer; every kClientPoll, check that the client still holds its connection, and cancel
    // the job when it went away (its kv_cache slot is freed at the next step). The socket is looked up now,
    // while the client is surely connected (a reset connection has no peer address to match).
    const int fd = find_connection_socket(http.local_addr, http.local_port, http.remote_addr, http.remote_port);
    std::unique_lock<std::mutex> lock(mu_);
    while (!job->cv.wait_for(lock, kClientPoll, [&] { return job->done; })) {
      if (job->cancelled || fd < 0) continue;
      lock.unlock();
      const bool gone = peer_closed(fd);
      lock.lock();
      if (gone) {
        cancel_job(job);
        arrived_cv_.notify_one();
      }
    }
    if (!job->error.empty()) return send_error(res, ApiError{400, job->error});
    res.set_content(response_body(job->req, job->results, *ctx_.tokenizer, job->id, job->created, model_name_)
                        .dump(-1, ' ', false, json::error_handler_t::replace),
                    "application/json");
    return;
  }
  // The releaser runs when cpp-httplib is done with the response: after [DONE], or when the client went
  // away (a failed write, or a connection found dead before the first one): then the job is cancelled.
  auto released = [this, job](bool success) {
    std::lock_guard<std::mutex> lock(mu_);
    --open_streams_;
    if (!success) cancel_job(job);
    arrived_cv_.notify_one();
  };
  res.set_chunked_content_provider("text/event-stream", [this, job](size_t, httplib::DataSink& sink) {
    std::unique_lock<std::mutex> lock(mu_);
    job->cv.wait(lock, [&] { return !job->events.empty() || job->done; });
    while (!job->events.empty()) {
      const std::string e = std::move(job->events.front());
      job->events.pop_front();
      lock.unlock();
      if (!sink.write(e.data(), e.size())) return false;  // the client went away: the releaser cancels the job
      lock.lock();
    }
    if (job->done && job->events.empty()) {
      if (!job->error.empty()) {
        const std::string e =
            "data: " + error_body(ApiError{400, job->error}).dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
        sink.write(e.data(), e.size());
      }
      if (job->error.empty() && job->req.stream_usage) {
        const std::string u = stream_usage_event(job->req, job->results, job->id, job->created, model_name_);
        sink.write(u.data(), u.size());
      }
      sink.write("data: [DONE]\n\n", 14);
      sink.done();
    }
    return true;
  }, released);
}

void Server::cancel_job(const std::shared_ptr<Job>& job) {
  if (job->done || job->cancelled) return;
  job->cancelled = true;
  to_cancel_.push_back(job);
}

void Server::poll_stop_signals() {
  const int signals = g_stop_signals.load(std::memory_order_relaxed);
  if (signals > signals_seen_) {
    const char* name = strsignal(g_last_stop_signal);
    if (!draining_) {
      draining_ = true;
      drain_start_ = Clock::now();
      drained_ = in_flight_;
      cancelled_at_drain_ = cancelled_count_;
      std::fprintf(stderr,
                   "tprun: %s: draining: finishing %d requests in flight (at most %g s, --drain-timeout), new ones get 503\n",
                   name, in_flight_, opts_.drain_timeout_s);
    } else if (!aborting_ && Clock::now() - drain_start_ > std::chrono::seconds(1)) {
      // (Within a second of the first: the same stop, e.g. Ctrl-C reaching a worker both from the terminal
      // and through tprun's launcher.)
      aborting_ = true;
      std::fprintf(stderr, "tprun: %s again: cancelling the %d requests in flight\n", name, in_flight_);
    }
    signals_seen_ = signals;
  }
  if (draining_ && !aborting_ && std::chrono::duration<double>(Clock::now() - drain_start_).count() > opts_.drain_timeout_s) {
    aborting_ = true;
    std::fprintf(stderr, "tprun: drain timeout (%g s): cancelling the %d requests still in flight\n",
                 opts_.drain_timeout_s, in_flight_);
  }
  if (aborting_)
    for (const auto& [index, job] : by_index_) cancel_job(job);
}

std::string Server::take_arrivals(bool wait) {
  std::unique_lock<std::mutex> lock(mu_);
  if (wait && arrivals_.empty() && to_cancel_.empty())
    arrived_cv_.wait_for(lock, kIdlePoll, [&] { return !arrivals_.empty() || !to_cancel_.empty(); });
  poll_stop_signals();
  json batch = json::array();
  for (const auto& job : arrivals_) {
    json prompts = json::array();
    for (const GenerationRequest& g : job->req.prompts) prompts.push_back(request_to_json(g));
    batch.push_back(prompts);
  }
  pending_.assign(arrivals_.begin(), arrivals_.end());
  arrivals_.clear();
  // Cancelled jobs the generator has: all their prompts' indices (finished ones are ignored alike on every
  // rank). Jobs still in this broadcast's "add" are cancelled at the next one.
  json cancel = json::array();
  std::vector<std::shared_ptr<Job>> later;
  for (const auto& job : to_cancel_) {
    if (job->done) continue;
    if (!job->indexed) {
      later.push_back(job);
      continue;
    }
    for (size_t k = 0; k < job->req.prompts.size(); ++k) cancel.push_back(job->first_index + k);
    cancelled_count_++;
  }
  to_cancel_ = std::move(later);
  if (draining_ && batch.empty() && in_flight_ == 0 && open_streams_ == 0) {
    std::fprintf(stderr, "tprun: drained (%d requests in flight at the signal, %llu cancelled), exiting\n", drained_,
                 static_cast<unsigned long long>(cancelled_count_ - cancelled_at_drain_));
    return "stop";
  }
  const bool idle_out = opts_.idle_exit_s > 0 && batch.empty() && wait && !draining_ &&
                        std::chrono::duration<double>(Clock::now() - last_request_).count() > opts_.idle_exit_s;
  if (idle_out) {
    std::fprintf(stderr, "tprun: no request for %g s (--idle-exit): exiting\n", opts_.idle_exit_s);
    return "stop";
  }
  return json{{"add", std::move(batch)}, {"cancel", std::move(cancel)}}.dump();
}

void Server::push_chunk(Job& job, size_t choice, const std::string& piece, const GenerationResult& so_far,
                        const std::string& finish_reason) {
  const std::string text = job.started[choice] ? piece : prompt_echo(job.req, choice, *ctx_.tokenizer) + piece;
  nlohmann::ordered_json logprobs;
  if (!job.logprobs.empty()) {
    job.logprobs[choice].add(so_far);
    logprobs = job.logprobs[choice].take();
  }
  job.events.push_back(stream_event(job.req, choice, text, finish_reason, !job.started[choice], job.id, job.created,
                                    model_name_, logprobs));
  job.started[choice] = true;
}

void Server::on_text(size_t index, const std::string& piece, const GenerationResult& so_far) {
  if (!output()) return;
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = by_index_.find(index);
  if (it == by_index_.end() || !it->second->req.stream) return;
  Job& job = *it->second;
  push_chunk(job, index - job.first_index, piece, so_far, "");
  job.cv.notify_all();
}

void Server::on_done(size_t index, const GenerationResult& r) {
  finished_.push_back(index);
  if (!output()) return;
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = by_index_.find(index);
  if (it == by_index_.end()) return;
  Job& job = *it->second;
  const size_t choice = index - job.first_index;
  job.results[choice] = r;
  if (job.req.stream) push_chunk(job, choice, "", r, r.finish_reason);
  job.started[choice] = true;
  if (--job.remaining == 0) {
    job.done = true;
    --in_flight_;
  }
  by_index_.erase(it);
  job.cv.notify_all();
}

void Server::run() {
  TPS_CHECK(ctx_.dp_size == 1, "serve: --dp " + std::to_string(ctx_.dp_size) + " is not supported",
            "serve with one replica (--tp / --pp); start one server per replica behind a load balancer");
  TPS_CHECK(ctx_.tokenizer != nullptr, "serve: " + ctx_.model_dir + " has no tokenizer",
            "copy the model's tokenizer.json or tokenizer.model into the converted directory");
  install_stop_handler();
  if (output()) start_http();
  GenerateCallbacks cb;
  cb.on_text = [this](size_t i, const std::string& s, const GenerationResult& so_far) { on_text(i, s, so_far); };
  cb.on_done = [this](size_t i, const GenerationResult& r) { on_done(i, r); };
  BatchGenerator gen(*ctx_.runner, *ctx_.tokenizer, cb);
  while (true) {
    // Block in the poll only when there is nothing to run; otherwise collect without waiting.
    std::string blob = output() ? take_arrivals(!gen.busy()) : std::string();
    blob = ctx_.replica_ranks->broadcast(blob, 0);
    if (blob == "stop") break;
    const json step = json::parse(blob);
    // Cancellations first, between steps and in the broadcast's order: every rank frees the same slots.
    for (const json& index : step["cancel"]) gen.cancel(index.get<size_t>());
    const json& batch = step["add"];
    for (size_t j = 0; j < batch.size(); ++j) {
      std::vector<GenerationRequest> reqs;
      for (const json& r : batch[j]) reqs.push_back(request_from_json(r));
      size_t first = 0;
      std::string error;
      try {  // add() checks before queuing anything; every rank throws alike
        first = gen.add(reqs);
      } catch (const Error& e) {
        error = e.what();
      }
      if (!output()) continue;
      std::lock_guard<std::mutex> lock(mu_);
      const std::shared_ptr<Job>& job = pending_[j];
      if (!error.empty()) {
        job->error = error;
        job->done = true;
        --in_flight_;
        job->cv.notify_all();
        continue;
      }
      job->first_index = first;
      job->indexed = true;
      for (size_t k = 0; k < reqs.size(); ++k) by_index_[first + k] = job;
    }
    if (gen.busy()) gen.step();
    for (size_t i : finished_) gen.take_result(i);
    finished_.clear();
    if (output()) {
      slots_in_use_ = gen.slots_in_use();
      running_ = static_cast<int>(gen.running());
      waiting_ = static_cast<int>(gen.waiting());
    }
  }
  if (output()) {
    http_.stop();
    if (http_thread_.joinable()) http_thread_.join();
  }
}

}  // namespace

void run_server(RankContext& ctx, const ServeOptions& options) {
  Server s(ctx, options);
  s.run();
}

}  // namespace tpshard::serve
