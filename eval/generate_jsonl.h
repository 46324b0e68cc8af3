// generate_jsonl.h: `tprun generate --input prompts.jsonl --output out.jsonl`: a resumable batch job
// over a JSONL file of prompts (machinery in eval/batch_job.h). Format documented in docs/EVAL.md.
#pragma once
#include <memory>
#include <string>

#include <vector>

#include "eval/batch_job.h"  // BatchItem
#include "eval/triviaqa_data.h"  // BadRecordPolicy
#include "runtime/chat_template.h"
#include "runtime/generate.h"
#include "runtime/session_types.h"

namespace tpshard::eval {

/// Options of a JSONL generation job beyond the contract's arguments.
struct GenerateJsonlOptions {
  BadRecordPolicy on_bad_record = BadRecordPolicy::Stop;  ///< malformed input line: stop (Error) or skip (warning)
  double progress_interval_s = 10;
  bool warn_skipped = true;  ///< print a warning per skipped line (false: tprun's preflight already printed them)
  /// "messages" records: the Jinja chat template file to render them with (empty: the model's own).
  std::string chat_template_file;
};

/// The chat template that "messages" records are rendered with, or why there is none (then such a
/// record is a bad line naming the reason).
struct JsonlChat {
  const ChatTemplate* tmpl = nullptr;
  std::string missing;  ///< the load error when tmpl is null
};

/// The requests of a JSONL prompts file (format: run_generate_jsonl), each line parsed, tokenized and
/// checked (check_request, unique ids) as the job checks them.
struct JsonlRequests {
  std::vector<BatchItem> items;      ///< good lines, in file order
  std::vector<std::string> prompts;  ///< items[i]'s prompt text
  size_t skipped = 0;                ///< bad lines left out (policy Skip)
};

/// Read input_path: Stop: throws Error "FILE:LINE: problem" at the first bad line; Skip: the line is left
/// out and, when print, reported on stderr as "warning: FILE:LINE: problem (skipped)". max_seq_len 0:
/// prompt lengths are not checked; model_seq_limit as check_request's. print: also the unknown-key warnings.
/// Integer fields must be JSON integers in range (json_fields.h): max_new_tokens, min_new_tokens, top_k
/// 0..2147483647, seed 0..2^64-1, prompt_ids 0..vocab_size-1; 4294967297, -1, 2.5 or 1e30 is a bad line.
/// "messages" records are rendered with chat (add_generation_prompt true) and tokenized without adding
/// special tokens (the template writes BOS), as `tprun chat` does.
/// Used by run_generate_jsonl and by tprun's preflight (before any weight loads).
JsonlRequests read_generate_jsonl(const std::string& input_path, const Tokenizer& tokenizer,
                                  const SamplingParams& defaults, int64_t max_seq_len, int64_t model_seq_limit,
                                  BadRecordPolicy policy, bool print, const JsonlChat& chat = {});

/// The template of "messages" records: load_chat_template(model_dir, template_file), or its Error's text.
/// holder keeps the loaded template alive as long as the result is used.
JsonlChat load_jsonl_chat(const std::string& model_dir, const std::string& template_file,
                          std::unique_ptr<ChatTemplate>& holder);

/// Input: one JSON object per line: {"id": any scalar (default: the 1-based line number), "prompt": "...",
/// "prompt_ids": [ints] or "messages": [{"role", "content"}, ...] (OpenAI's chat messages, rendered with the
/// model's chat template or options.chat_template_file; exactly one of "messages" and the prompt), optional "max_new_tokens", "min_new_tokens", "temperature", "top_k", "top_p",
/// "min_p", "repetition_penalty", "seed", "stop" (string or list), "ignore_eos"} (absent fields take
/// `defaults`). Output (appended, resumable, finally in input order): {"id", "prompt", "text",
/// "output_ids", "finish_reason", "prompt_tokens"}. SPMD: call on every rank with identical arguments.
/// Throws Error naming FILE:LINE for a malformed line (policy Stop) or a duplicate id.
/// tprun's preflight, before any weight loads: an existing output_path must not be being written by
/// another job and must be resumable by this one (check_batch_output: this model, these requests).
/// Throws Error naming the file. Returns the ids' keys (input order) when output_path already holds every
/// request's result (the job is complete: finish it with put_in_input_order, no model needed), else {}.
std::vector<std::string> check_generate_output(const JsonlRequests& requests, const std::string& output_path,
                                               const Manifest& manifest, const std::string& model_dir);

void run_generate_jsonl(RankContext& ctx, const std::string& input_path, const std::string& output_path,
                        const SamplingParams& defaults, int batch_size);
void run_generate_jsonl(RankContext& ctx, const std::string& input_path, const std::string& output_path,
                        const SamplingParams& defaults, int batch_size, const GenerateJsonlOptions& options);

}  // namespace tpshard::eval
