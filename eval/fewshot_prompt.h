// fewshot_prompt.h: the few-shot TriviaQA prompt and the answer taken back out of generated text.
// Format as in the usual harnesses (lm-evaluation-harness triviaqa, llm-foundry): each shot is
// "Question: Q\nAnswer: A", shots are separated by a blank line, and the prompt ends "Question: Q\nAnswer:".
#pragma once
#include <string>
#include <vector>

#include "eval/triviaqa_data.h"

namespace tpshard::eval {

/// "Question: S1.q\nAnswer: S1.a\n\n" ... "Question: q\nAnswer:" (no trailing space; the model writes
/// the space before its answer). Shots use their canonical answer (TriviaQaRecord::answer).
std::string build_fewshot_prompt(const std::vector<TriviaQaRecord>& shots, const std::string& question);

/// The answer in a generated continuation: the text up to the first '\n', stripped as Python's
/// str.strip() does (utf8::python_strip: U+001C..U+001F are white space there too).
std::string extract_answer(const std::string& generated);

}  // namespace tpshard::eval
