// batch_job.cpp: resumable, length-sorted, batched generation jobs (see batch_job.h).
#include "eval/batch_job.h"

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <mutex>
#include <memory>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "eval/progress.h"
#include "eval/resumable_jsonl.h"
#include "format/error.h"
#include "format/hash.h"

namespace tpshard::eval {

std::string request_fingerprint(const GenerationRequest& r) {
  const SamplingParams& p = r.params;
  const nlohmann::json j = {{"prompt_ids", r.prompt_ids},
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
  const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return hash_to_hex(xxh3_64(text.data(), text.size()));
}

std::string model_fingerprint(const Manifest& m) {
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

/// What the replicas of a data-parallel job share, owned by dp_rank 0's output rank and published to the
/// others through ctx.replicas: the one results file and the sums of their reports.
struct SharedOutput {
  std::mutex mutex;
  ResumableJsonlWriter* writer = nullptr;
  size_t generated = 0;
  int64_t prompt_tokens = 0, output_tokens = 0;
};

}  // namespace

BatchJobReport run_batch_job(RankContext& ctx, const std::vector<BatchItem>& items, const BatchJobOptions& opts,
                             const MakeLine& make_line) {
  TPS_CHECK(ctx.runner != nullptr && ctx.tokenizer != nullptr, "batch job: rank context has no model",
            "open the model with run_on_ranks first");
  TPS_CHECK(opts.batch_size >= 1, "--batch-size " + std::to_string(opts.batch_size) + " must be at least 1",
            "use a positive batch size, e.g. 48");
  // With replicas (dp_size > 1) each replica's output rank writes its share of the items through the
  // one writer of dp_rank 0; without, the job's output rank writes everything.
  const bool replicated = ctx.dp_size > 1 && ctx.replicas != nullptr;
  const bool writer_rank = replicated ? ctx.is_replica_output_rank() : ctx.is_output_rank();
  const bool owner = writer_rank && ctx.dp_rank == 0;  // opens, finally rewrites and releases the file
  BatchJobReport report;
  report.total = items.size();

  std::vector<std::string> keys;
  keys.reserve(items.size());
  std::unordered_set<std::string> key_set;
  for (const auto& it : items) {
    keys.push_back(id_key(it.id));
    if (!key_set.insert(keys.back()).second)
      throw Error(opts.output_path + ": two input records have the id " + keys.back(),
                  "ids must be unique for resuming to work; fix the input");
  }

  // Every rank reads the same existing output (before anybody writes) so all skip the same ids.
  JsonlContents existing = read_jsonl_results(opts.output_path);
  std::unordered_set<std::string> done(existing.keys.begin(), existing.keys.end());
  const std::string model_xxh3 = ctx.manifest != nullptr ? model_fingerprint(*ctx.manifest) : std::string();
  if (!model_xxh3.empty()) {
    // Results of another model must not be reused: the whole file is refused (lines without the
    // field, from older files, are not compared).
    for (size_t l = 0; l < existing.lines.size(); ++l) {
      const nlohmann::json j = nlohmann::json::parse(existing.lines[l], nullptr, false);
      auto h = j.is_object() ? j.find("model_xxh3") : j.end();
      if (h != j.end() && (!h->is_string() || h->get<std::string>() != model_xxh3))
        throw Error(opts.output_path + ": was made with another model: its result for id " + existing.keys[l] +
                        " has model_xxh3 " + h->dump() + ", the model " +
                        (ctx.model_dir.empty() ? std::string("being run") : ctx.model_dir) + " has \"" + model_xxh3 + "\"",
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
  if (ctx.comm != nullptr && ctx.tp_size > 1) ctx.comm->barrier();

  std::vector<size_t> todo;
  for (size_t i = 0; i < items.size(); ++i)
    if (done.count(keys[i]) == 0) todo.push_back(i);
  report.already_done = items.size() - todo.size();

  std::unique_ptr<ResumableJsonlWriter> writer;
  SharedOutput own;
  SharedOutput* shared = &own;
  if (owner) {
    writer = std::make_unique<ResumableJsonlWriter>(opts.output_path);
    own.writer = writer.get();
    report.truncated_bytes = writer->truncated_bytes();
    if (report.truncated_bytes > 0)
      std::fprintf(stderr, "%s: %s: cut a torn last line (%zu bytes) left by an interrupted run\n", opts.label.c_str(),
                   opts.output_path.c_str(), report.truncated_bytes);
  }
  if (replicated && writer_rank) {  // the other replicas write through dp_rank 0's writer
    if (owner) ctx.replicas->publish(&own);
    ctx.replicas->barrier();
    shared = static_cast<SharedOutput*>(ctx.replicas->published());
  }

  // Longest prompts first: equal-length neighbours share batches (little padding), and a prompt that
  // does not fit fails at once rather than hours in.
  std::stable_sort(todo.begin(), todo.end(), [&](size_t a, size_t b) {
    return items[a].request.prompt_ids.size() > items[b].request.prompt_ids.size();
  });
  if (replicated) {  // this replica's share: every dp_size-th item of the sorted list (similar lengths)
    std::vector<size_t> mine;
    for (size_t k = static_cast<size_t>(ctx.dp_rank); k < todo.size(); k += static_cast<size_t>(ctx.dp_size))
      mine.push_back(todo[k]);
    todo.swap(mine);
  }

  // With replicas, dp_rank 0 shows its own share's progress.
  const size_t shown_total = replicated ? report.already_done + todo.size() : items.size();
  Progress progress(replicated ? opts.label + " (replica 0 of " + std::to_string(ctx.dp_size) + ")" : opts.label,
                    shown_total, report.already_done, owner, opts.progress_interval_s);
  const auto t0 = std::chrono::steady_clock::now();
  const size_t bs = static_cast<size_t>(opts.batch_size);
  for (size_t start = 0; start < todo.size(); start += bs) {
    std::vector<size_t> batch(todo.begin() + static_cast<std::ptrdiff_t>(start),
                              todo.begin() + static_cast<std::ptrdiff_t>(std::min(todo.size(), start + bs)));
    std::sort(batch.begin(), batch.end());  // input order within the batch
    std::vector<GenerationRequest> requests;
    requests.reserve(batch.size());
    for (size_t i : batch) {
      requests.push_back(items[i].request);
      requests.back().id = items[i].id.is_string() ? items[i].id.get<std::string>() : keys[i];
    }
    std::vector<GenerationResult> results = generate(*ctx.runner, *ctx.tokenizer, requests);
    TPS_CHECK(results.size() == batch.size(), "batch job: generate() returned " + std::to_string(results.size()) +
                                                  " results for " + std::to_string(batch.size()) + " requests",
              "this is a bug in runtime/generate");
    std::vector<std::string> lines;
    int64_t batch_tokens = 0;
    for (size_t k = 0; k < batch.size(); ++k) {
      const size_t i = batch[k];
      batch_tokens += static_cast<int64_t>(results[k].output_ids.size());
      report.prompt_tokens += static_cast<int64_t>(requests[k].prompt_ids.size());
      if (!writer_rank) continue;
      nlohmann::ordered_json line;
      line["id"] = items[i].id;
      nlohmann::ordered_json fields = make_line(i, results[k]);
      for (auto& [key, value] : fields.items())
        if (key != "id") line[key] = value;
      if (!model_xxh3.empty()) line["model_xxh3"] = model_xxh3;
      line["request_xxh3"] = request_fingerprint(items[i].request);
      lines.push_back(line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
    }
    if (writer_rank) {
      std::lock_guard<std::mutex> lock(shared->mutex);
      shared->writer->append(lines);
    }
    report.generated += batch.size();
    report.output_tokens += batch_tokens;
    progress.advance(batch.size(), batch_tokens);
  }
  report.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  progress.finish();

  if (replicated && writer_rank) {
    {
      std::lock_guard<std::mutex> lock(shared->mutex);
      shared->generated += report.generated;
      shared->prompt_tokens += report.prompt_tokens;
      shared->output_tokens += report.output_tokens;
    }
    ctx.replicas->barrier();  // every replica has written its share
    report.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (owner) {  // the job's totals
      report.generated = own.generated;
      report.prompt_tokens = own.prompt_tokens;
      report.output_tokens = own.output_tokens;
    }
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
