// triviaqa_data.h: read TriviaQA questions and answers from the layouts found in the wild.
// Owns: layout detection, record validation, bad-record policy. Does not own: prompts or scoring.
// Layouts (detected per file, then per record):
//   - Hugging Face rc / rc.nocontext records, as JSONL or a JSON array: question, question_id,
//     answer.{value, aliases, normalized_aliases}
//   - the original release JSON: {"Data": [{Question, QuestionId, Answer.{Value, Aliases,
//     NormalizedAliases, HumanAnswers}}], ...}
//   - llm-foundry / lm-eval style JSONL: context ("Question: ...\nAnswer:"), answer, aliases
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tpshard::eval {

/// One question. id is unique within a file (used as the predictions key).
struct TriviaQaRecord {
  std::string id;                          ///< question_id / QuestionId; llm-foundry layout: "line-N"
  std::string question;                    ///< without the "Question: " prefix
  std::string answer;                      ///< the canonical answer (value), used when the record is a shot
  std::vector<std::string> ground_truths;  ///< every accepted answer: normalized_aliases, aliases, value,
                                           ///< human answers (raw strings, duplicates after normalization removed)
  std::string source;                      ///< "FILE:LINE" or "FILE: Data[i]" for messages
};

/// What to do with a malformed record (not an object, no question, no answer, duplicate id).
enum class BadRecordPolicy { Stop, Skip };

struct TriviaQaLoadResult {
  std::vector<TriviaQaRecord> records;   ///< in file order
  std::vector<std::string> warnings;     ///< one per skipped record: "FILE:LINE: problem (skipped)"
};

/// Read a TriviaQA file in any supported layout. Stop: throws Error("FILE:LINE: problem", hint) at the
/// first bad record; Skip: the record is left out and a warning is returned. Throws Error when the file
/// cannot be read or holds no record.
TriviaQaLoadResult load_triviaqa(const std::string& path, BadRecordPolicy policy = BadRecordPolicy::Stop);

/// Parse one record object of any layout; `where` names it in errors. Throws Error on a bad record.
/// default_id is used when the record has no id field.
TriviaQaRecord parse_triviaqa_record(const nlohmann::json& j, const std::string& where,
                                     const std::string& default_id);

BadRecordPolicy parse_bad_record_policy(const std::string& s);  ///< "stop" | "skip"; else throws Error

}  // namespace tpshard::eval
