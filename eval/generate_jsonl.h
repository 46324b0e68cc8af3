// generate_jsonl.h: `tprun generate --input prompts.jsonl --output out.jsonl`: a resumable batch job
// over a JSONL file of prompts (machinery in eval/batch_job.h). Format documented in docs/EVAL.md.
#pragma once
#include <string>

#include "eval/triviaqa_data.h"  // BadRecordPolicy
#include "runtime/generate.h"
#include "runtime/session.h"

namespace tpshard::eval {

/// Options of a JSONL generation job beyond the contract's arguments.
struct GenerateJsonlOptions {
  BadRecordPolicy on_bad_record = BadRecordPolicy::Stop;  ///< malformed input line: stop (Error) or skip (warning)
  double progress_interval_s = 10;
};

/// Input: one JSON object per line: {"id": any scalar (default: the 1-based line number), "prompt": "..."
/// or "prompt_ids": [ints], optional "max_new_tokens", "min_new_tokens", "temperature", "top_k", "top_p",
/// "min_p", "repetition_penalty", "seed", "stop" (string or list), "ignore_eos"} (absent fields take
/// `defaults`). Output (appended, resumable, finally in input order): {"id", "prompt", "text",
/// "output_ids", "finish_reason", "prompt_tokens"}. SPMD: call on every rank with identical arguments.
/// Throws Error naming FILE:LINE for a malformed line (policy Stop) or a duplicate id.
void run_generate_jsonl(RankContext& ctx, const std::string& input_path, const std::string& output_path,
                        const SamplingParams& defaults, int batch_size);
void run_generate_jsonl(RankContext& ctx, const std::string& input_path, const std::string& output_path,
                        const SamplingParams& defaults, int batch_size, const GenerateJsonlOptions& options);

}  // namespace tpshard::eval
