// fewshot_prompt.cpp: few-shot prompt construction and answer extraction (see fewshot_prompt.h).
#include "eval/fewshot_prompt.h"

#include "tokenizer/utf8.h"

namespace tpshard::eval {

std::string build_fewshot_prompt(const std::vector<TriviaQaRecord>& shots, const std::string& question) {
  std::string p;
  for (const auto& s : shots) p += "Question: " + s.question + "\nAnswer: " + s.answer + "\n\n";
  p += "Question: " + question + "\nAnswer:";
  return p;
}

std::string extract_answer(const std::string& generated) {
  return utf8::python_strip(generated.substr(0, generated.find('\n')));  // Python: text.split("\n")[0].strip()
}

}  // namespace tpshard::eval
