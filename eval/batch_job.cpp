// batch_job.cpp: resumable, prefix-grouped, batched generation jobs (see batch_job.h).
#include "eval/batch_job.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "common/log.h"
#include "common/progress.h"
#include "eval/resumable_jsonl.h"
#include "format/error.h"
#include "format/hash.h"
#include "runtime/request_json.h"

namespace tpshard::eval {

std::string request_fingerprint(const GenerationRequest& r) {
  const std::string text = generation_json(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return hash_to_hex(xxh3_64(text.data(), text.size()));
}

std::string model_fingerprint(const Manifest& m) {
  const bool hashed = !m.source.empty() &&
                      std::all_of(m.source.begin(), m.source.end(), [](const SourceFile& f) { return f.xxh3 != 0; });
  if (!hashed) return legacy_model_fingerprint(m);
  std::string text = std::string("dtype:") + dtype_name(m.dtype) + "\n";
  for (const SourceFile& f : m.source) text += f.name + " " + std::to_string(f.bytes) + " " + hash_to_hex(f.xxh3) + "\n";
  return hash_to_hex(xxh3_64(text.data(), text.size()));
}

std::string legacy_model_fingerprint(const Manifest& m) {
  std::string text;
  for (const auto& [tp_size, shards] : m.shards)
    for (const ManifestShard& sh : shards)
      if (sh.table_xxh3)
        text += "tp" + std::to_string(tp_size) + "/rank" + std::to_string(sh.tp_rank) + ":" + hash_to_hex(*sh.table_xxh3) + "\n";
  for (const auto& [key, shards] : m.pp_shards)
    for (const ManifestShard& sh : shards)
      if (sh.table_xxh3) text += shard_file_name(key.first, sh.pp_stage, key.second, sh.tp_rank) + ":" + hash_to_hex(*sh.table_xxh3) + "\n";
  return text.empty() ? std::string() : hash_to_hex(xxh3_64(text.data(), text.size()));
}

namespace {

/// Why stored `line` cannot count as item's result, completing "holds a result for id X ..." ("" when it
/// counts).
std::string stored_mismatch(const std::string& line, const BatchItem& item,
                            const std::vector<std::string>& result_keys) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);  // read_jsonl_results checked it
  auto h = j.find("request_xxh3");
  if (h != j.end() && (!h->is_string() || h->get<std::string>() != request_fingerprint(item.request)))
    return "that was made for another request: its request_xxh3 " + h->dump() + " is not this input's " +
           request_fingerprint(item.request) + " (prompt or sampling settings differ)";
  for (auto it = item.expect.begin(); it != item.expect.end(); ++it) {
    auto f = j.find(it.key());
    if (f == j.end()) {
      // Without request_xxh3 (a line of an older file) the fields are the only check: a line that has
      // neither (a stub or a line written by hand) cannot be told from another request's result.
      if (h == j.end())
        return "that cannot be checked: it has neither \"request_xxh3\" nor \"" + it.key() +
               "\" (not a line tprun wrote)";
      continue;
    }
    if (*f != it.value())
      return "that was made for another request: its \"" + it.key() + "\" is " +
             f->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + ", this input's is " +
             it.value().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  for (const std::string& key : result_keys) {  // this request's line: it must hold the result
    auto r = j.find(key);
    if (r == j.end() || r->is_null())
      return "that is incomplete: it has no \"" + key + "\" (not a line tprun wrote)";
  }
  return "";
}

}  // namespace

namespace {

/// One round of a data-parallel job as a replica's output rank sends it to the others: its batch's
/// result lines (already serialized), token counts and generation stats.
std::string encode_round(const std::vector<std::string>& lines, size_t generated, int64_t prompt_tokens,
                         int64_t output_tokens, const GenerationStats& st) {
  const nlohmann::json j = {{"lines", lines}, {"n", generated}, {"p", prompt_tokens}, {"o", output_tokens},
                            {"pt", st.prefill_tokens}, {"st", st.shared_prefix_tokens}, {"dt", st.decode_tokens},
                            {"mt", st.mixed_decode_tokens}, {"ps", st.prefill_seconds}, {"ds", st.decode_seconds}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

struct Round {
  std::vector<std::string> lines;
  size_t generated = 0;
  int64_t prompt_tokens = 0, output_tokens = 0;
  GenerationStats stats;
};

Round decode_round(const std::string& blob, int dp_rank) {
  const nlohmann::json j = nlohmann::json::parse(blob, nullptr, false);
  TPS_CHECK(j.is_object() && j.contains("lines") && j["lines"].is_array(),
            "batch job: dp_rank " + std::to_string(dp_rank) + " sent a malformed round", "this is a bug in eval/batch_job");
  Round r;
  r.lines = j["lines"].get<std::vector<std::string>>();
  r.generated = j["n"].get<size_t>();
  r.prompt_tokens = j["p"].get<int64_t>();
  r.output_tokens = j["o"].get<int64_t>();
  r.stats.prefill_tokens = j["pt"].get<int64_t>();
  r.stats.shared_prefix_tokens = j["st"].get<int64_t>();
  r.stats.decode_tokens = j["dt"].get<int64_t>();
  r.stats.mixed_decode_tokens = j.value("mt", int64_t{0});
  r.stats.prefill_seconds = j["ps"].get<double>();
  r.stats.decode_seconds = j["ds"].get<double>();
  return r;
}

}  // namespace

std::vector<std::string> check_batch_output(const std::vector<BatchItem>& items, const BatchJobOptions& opts,
                                            const Manifest* manifest, const std::string& model_dir,
                                            JsonlContents* contents) {
  std::vector<std::string> keys;
  keys.reserve(items.size());
  std::unordered_set<std::string> key_set;
  for (const auto& it : items) {
    keys.push_back(id_key(it.id));
    if (!key_set.insert(keys.back()).second)
      throw Error(opts.output_path + ": two input records have the id " + keys.back(),
                  "ids must be unique for resuming to work; fix the input");
  }

  JsonlContents existing = read_jsonl_results(opts.output_path);
  const std::string model_xxh3 = manifest != nullptr ? model_fingerprint(*manifest) : std::string();
  const std::string legacy_xxh3 = manifest != nullptr ? legacy_model_fingerprint(*manifest) : std::string();
  if (!model_xxh3.empty()) {
    // Results of another model must not be reused: the whole file is refused (lines without the
    // field, from older files, are not compared).
    for (size_t l = 0; l < existing.lines.size(); ++l) {
      const nlohmann::json j = nlohmann::json::parse(existing.lines[l], nullptr, false);
      auto h = j.is_object() ? j.find("model_xxh3") : j.end();
      if (h != j.end() && (!h->is_string() || (h->get<std::string>() != model_xxh3 && h->get<std::string>() != legacy_xxh3)))
        throw Error(opts.output_path + ": was made with another model: its result for id " + existing.keys[l] +
                        " has model_xxh3 " + h->dump() + ", the model " +
                        (model_dir.empty() ? std::string("being run") : model_dir) + " has \"" + model_xxh3 + "\"",
                    "delete " + opts.output_path + " or choose another --output");
    }
  }
  {
    // A stored line under an item's id must be that item's result: different prompts with default ids
    // (line numbers) must not pick up another input's results. Every rank checks alike, before writing.
    std::unordered_map<std::string, size_t> first_line;
    for (size_t l = 0; l < existing.keys.size(); ++l) first_line.emplace(existing.keys[l], l);
    for (size_t i = 0; i < items.size(); ++i) {
      auto it = first_line.find(keys[i]);
      if (it == first_line.end()) continue;
      const std::string why = stored_mismatch(existing.lines[it->second], items[i], opts.result_keys);
      if (!why.empty())
        throw Error(opts.output_path + ": holds a result for id " + keys[i] + " " + why,
                    "delete " + opts.output_path + " or choose another --output");
    }
  }
  if (contents != nullptr) *contents = std::move(existing);
  return keys;
}

bool all_results_present(const std::vector<std::string>& keys, const JsonlContents& existing) {
  const std::unordered_set<std::string> done(existing.keys.begin(), existing.keys.end());
  return std::all_of(keys.begin(), keys.end(), [&done](const std::string& k) { return done.count(k) > 0; });
}

void put_in_input_order(const std::string& path, const std::vector<std::string>& keys) {
  ResumableJsonlWriter writer(path);  // the lock, and a torn tail cut
  rewrite_jsonl_in_order(path, keys);
}

void check_output_not_locked(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;  // not there yet (or unreadable: the job's own open reports that)
  const bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // releases the probe's lock
  TPS_CHECK(!held, path + ": another job is writing this file", "wait for it to finish or stop it, then rerun to resume");
}

namespace {

/// The job's requests through one BatchGenerator (no replicas): at most `batch_size` run at once and as
/// many more wait, so a finished request's slot is refilled at the next step and a shared prefix stays in
/// use (prefilled once for the whole job, not once per batch). Per step, on_result(i, result, &lines)
/// for each finished item i (in finishing order), then on_step(lines, finished, output tokens), also
/// when none finished.
void run_continuously(RankContext& ctx, const std::vector<size_t>& todo, size_t batch_size,
                      const std::function<GenerationRequest(size_t)>& request_of,
                      const std::function<void(size_t, const GenerationResult&, std::vector<std::string>*)>& on_result,
                      const std::function<void(const std::vector<std::string>&, size_t, int64_t)>& on_step,
                      GenerationStats* stats) {
  std::vector<size_t> finished;  // generator indices finished in this step
  GenerateCallbacks cb;
  cb.on_done = [&](size_t index, const GenerationResult&) { finished.push_back(index); };
  BatchGenerator gen(*ctx.runner, *ctx.tokenizer, cb);
  gen.set_max_running(batch_size);
  std::vector<size_t> item_of;  // generator index -> item
  size_t next = 0;
  while (next < todo.size() || gen.busy()) {
    if (next < todo.size() && gen.waiting() < batch_size) {  // keep a batch waiting behind the running one
      std::vector<GenerationRequest> add;
      while (next < todo.size() && gen.waiting() + add.size() < 2 * batch_size) {
        add.push_back(request_of(todo[next]));
        item_of.push_back(todo[next++]);
      }
      gen.add(std::move(add));
    }
    gen.step();
    std::vector<std::string> lines;
    int64_t tokens = 0;
    for (const size_t index : finished) {
      const GenerationResult r = gen.take_result(index);
      tokens += static_cast<int64_t>(r.output_ids.size());
      on_result(item_of[index], r, &lines);
    }
    on_step(lines, finished.size(), tokens);
    finished.clear();
  }
  *stats = gen.stats();
}

}  // namespace

BatchJobReport run_batch_job(RankContext& ctx, const std::vector<BatchItem>& items, const BatchJobOptions& opts,
                             const MakeLine& make_line) {
  TPS_CHECK(ctx.runner != nullptr && ctx.tokenizer != nullptr, "batch job: rank context has no model",
            "open the model with run_on_ranks first");
  TPS_CHECK(opts.batch_size >= 1, "--batch-size " + std::to_string(opts.batch_size) + " must be at least 1",
            "use a positive batch size, e.g. 48");
  // With replicas (dp_size > 1) each replica's output rank sends its share's lines to dp_rank 0, whose
  // output rank writes the one file; without, the job's output rank writes everything.
  const bool replicated = ctx.dp_size > 1;
  const bool writer_rank = replicated ? ctx.is_replica_output_rank() : ctx.is_output_rank();
  TPS_CHECK(!replicated || !writer_rank || ctx.replicas != nullptr,
            "batch job: dp_rank " + std::to_string(ctx.dp_rank) + " has no exchange with the other replicas",
            "this is a bug in the session (RankContext::replicas)");
  const bool owner = writer_rank && ctx.dp_rank == 0;  // opens, finally rewrites and releases the file
  BatchJobReport report;
  report.total = items.size();

  // Every rank reads the same existing output (before anybody writes) so all skip the same ids.
  JsonlContents existing;
  const std::vector<std::string> keys = check_batch_output(items, opts, ctx.manifest, ctx.model_dir, &existing);
  std::unordered_set<std::string> done(existing.keys.begin(), existing.keys.end());
  const std::string model_xxh3 = ctx.manifest != nullptr ? model_fingerprint(*ctx.manifest) : std::string();
  if (ctx.comm != nullptr && ctx.tp_size > 1) ctx.comm->barrier();

  std::vector<size_t> todo;
  for (size_t i = 0; i < items.size(); ++i)
    if (done.count(keys[i]) == 0) todo.push_back(i);
  report.already_done = items.size() - todo.size();

  std::unique_ptr<ResumableJsonlWriter> writer;
  if (owner) {
    writer = std::make_unique<ResumableJsonlWriter>(opts.output_path);
    report.truncated_bytes = writer->truncated_bytes();
    if (report.truncated_bytes > 0)
      std::fprintf(stderr, "%s: %s: cut a torn last line (%zu bytes) left by an interrupted run\n", opts.label.c_str(),
                   opts.output_path.c_str(), report.truncated_bytes);
  }

  // Prompts in token order: prompts that start alike (the same few-shot examples or system prompt) fall
  // into the same batch, where generate() prefills their common prefix once. (Every request was checked
  // against the sequence limit before the job started.)
  std::stable_sort(todo.begin(), todo.end(), [&](size_t a, size_t b) {
    return items[a].request.prompt_ids < items[b].request.prompt_ids;
  });
  const size_t bs = static_cast<size_t>(opts.batch_size);
  // With replicas, every replica takes every dp_size-th item of the sorted list, and
  // the job runs in rounds of one batch per replica: after each round the replicas' output ranks
  // exchange their lines (ctx.replicas) and dp_rank 0 writes them all. Replica 0 has the most items, so
  // its batch count is the number of rounds; a replica without a batch in a round sends nothing new.
  size_t rounds = (todo.size() + bs - 1) / bs;
  if (replicated) {
    const size_t dp = static_cast<size_t>(ctx.dp_size);
    rounds = ((todo.size() + dp - 1) / dp + bs - 1) / bs;
    std::vector<size_t> mine;
    for (size_t k = static_cast<size_t>(ctx.dp_rank); k < todo.size(); k += dp) mine.push_back(todo[k]);
    todo.swap(mine);
  }

  // The results line of item i (a writer rank's job).
  auto result_line = [&](size_t i, const GenerationResult& result) {
    nlohmann::ordered_json line;
    line["id"] = items[i].id;
    nlohmann::ordered_json fields = make_line(i, result);
    for (auto& [key, value] : fields.items())
      if (key != "id") line[key] = value;
    if (!model_xxh3.empty()) line["model_xxh3"] = model_xxh3;
    line["request_xxh3"] = request_fingerprint(items[i].request);
    return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  };
  auto request_of = [&](size_t i) {
    GenerationRequest r = items[i].request;
    r.id = items[i].id.is_string() ? items[i].id.get<std::string>() : keys[i];
    return r;
  };
  Progress progress(opts.label, items.size(), ProgressUnit::Prompts, owner && log_enabled(LogLevel::Info),
                    opts.progress_interval_s, nullptr,
                    report.already_done);
  const auto t0 = std::chrono::steady_clock::now();
  size_t job_generated = 0;
  int64_t job_prompt_tokens = 0, job_output_tokens = 0;
  GenerationStats job_stats;  // with replicas: tokens summed over them, seconds of the slowest per round
  if (!replicated) {
    run_continuously(ctx, todo, bs, request_of, [&](size_t i, const GenerationResult& r, std::vector<std::string>* lines) {
      report.generated += 1;
      report.prompt_tokens += static_cast<int64_t>(items[i].request.prompt_ids.size());
      report.output_tokens += static_cast<int64_t>(r.output_ids.size());
      if (writer_rank) lines->push_back(result_line(i, r));
    }, [&](const std::vector<std::string>& lines, size_t n, int64_t tokens) {
      if (owner) {
        writer->append(lines);
        writer->sync_if_due();
      }
      if (n > 0) progress.add(n, tokens);
    }, &report.stats);
    rounds = 0;  // the loop below is the replicas' path
  }
  for (size_t round = 0; round < rounds; ++round) {
    const size_t start = round * bs;
    std::vector<size_t> batch;
    if (start < todo.size())
      batch.assign(todo.begin() + static_cast<std::ptrdiff_t>(start),
                   todo.begin() + static_cast<std::ptrdiff_t>(std::min(todo.size(), start + bs)));
    std::sort(batch.begin(), batch.end());  // input order within the batch
    std::vector<GenerationRequest> requests;
    requests.reserve(batch.size());
    for (size_t i : batch) requests.push_back(request_of(i));
    std::vector<GenerationResult> results;
    GenerationStats st;  // this batch's
    if (!requests.empty()) {
      results = generate(*ctx.runner, *ctx.tokenizer, requests, {}, &st);
      report.stats.prefill_tokens += st.prefill_tokens;
      report.stats.shared_prefix_tokens += st.shared_prefix_tokens;
      report.stats.decode_tokens += st.decode_tokens;
      report.stats.mixed_decode_tokens += st.mixed_decode_tokens;
      report.stats.prefill_seconds += st.prefill_seconds;
      report.stats.decode_seconds += st.decode_seconds;
    }
    TPS_CHECK(results.size() == batch.size(), "batch job: generate() returned " + std::to_string(results.size()) +
                                                  " results for " + std::to_string(batch.size()) + " requests",
              "this is a bug in runtime/generate");
    std::vector<std::string> lines;
    int64_t batch_tokens = 0, batch_prompt_tokens = 0;
    for (size_t k = 0; k < batch.size(); ++k) {
      const size_t i = batch[k];
      batch_tokens += static_cast<int64_t>(results[k].output_ids.size());
      batch_prompt_tokens += static_cast<int64_t>(requests[k].prompt_ids.size());
      if (writer_rank) lines.push_back(result_line(i, results[k]));
    }
    report.generated += batch.size();
    report.prompt_tokens += batch_prompt_tokens;
    report.output_tokens += batch_tokens;
    std::vector<Round> round_of;  // every replica's part of this round (one entry without replicas)
    if (replicated && writer_rank) {
      const std::vector<std::string> blobs =
          ctx.replicas->all_gather(encode_round(lines, batch.size(), batch_prompt_tokens, batch_tokens, st));
      for (size_t r = 0; r < blobs.size(); ++r) round_of.push_back(decode_round(blobs[r], static_cast<int>(r)));
    } else {
      round_of.push_back(Round{std::move(lines), batch.size(), batch_prompt_tokens, batch_tokens, st});
    }
    size_t round_items = 0;
    int64_t round_tokens = 0;
    double round_prefill_s = 0, round_decode_s = 0;  // the replicas run at once: the slowest one's
    for (Round& r : round_of) {
      job_stats.prefill_tokens += r.stats.prefill_tokens;
      job_stats.shared_prefix_tokens += r.stats.shared_prefix_tokens;
      job_stats.decode_tokens += r.stats.decode_tokens;
      job_stats.mixed_decode_tokens += r.stats.mixed_decode_tokens;
      round_prefill_s = std::max(round_prefill_s, r.stats.prefill_seconds);
      round_decode_s = std::max(round_decode_s, r.stats.decode_seconds);
      if (owner) writer->append(r.lines);
      round_items += r.generated;
      round_tokens += r.output_tokens;
      job_generated += r.generated;
      job_prompt_tokens += r.prompt_tokens;
      job_output_tokens += r.output_tokens;
    }
    job_stats.prefill_seconds += round_prefill_s;
    job_stats.decode_seconds += round_decode_s;
    progress.add(round_items, round_tokens);
  }
  report.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  progress.finish();
  if (replicated && owner) {  // the job's totals, all replicas together
    report.generated = job_generated;
    report.prompt_tokens = job_prompt_tokens;
    report.output_tokens = job_output_tokens;
    report.stats = job_stats;
  }
  if (ctx.tp_rank == 0 && ctx.dp_rank == 0 && ctx.pp_size > 1)
    std::fprintf(stderr, "%s: %s\n", opts.label.c_str(), ctx.runner->pipeline_report().c_str());
  if (owner) {
    rewrite_jsonl_in_order(opts.output_path, keys);  // still holding the writer's lock
    writer.reset();
  }
  return report;
}

}  // namespace tpshard::eval
