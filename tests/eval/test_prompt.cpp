// test_prompt.cpp: the few-shot prompt (exact string) and answer extraction.
#include <doctest/doctest.h>

#include "eval/fewshot_prompt.h"

using namespace tpshard::eval;

TEST_CASE("few-shot prompt: exact string") {
  std::vector<TriviaQaRecord> shots(2);
  shots[0].question = "Who was the man behind The Chipmunks?";
  shots[0].answer = "David Seville";
  shots[1].question = "What star sign is Jamie Lee Curtis?";
  shots[1].answer = "Scorpio";
  CHECK(build_fewshot_prompt(shots, "Of which African country is Niamey the capital?") ==
        "Question: Who was the man behind The Chipmunks?\nAnswer: David Seville\n\n"
        "Question: What star sign is Jamie Lee Curtis?\nAnswer: Scorpio\n\n"
        "Question: Of which African country is Niamey the capital?\nAnswer:");
  CHECK(build_fewshot_prompt({}, "Q?") == "Question: Q?\nAnswer:");
}

TEST_CASE("answer extraction: up to the first newline, stripped") {
  CHECK(extract_answer(" Niger\n\nQuestion: next") == "Niger");
  CHECK(extract_answer(" Pink Floyd") == "Pink Floyd");
  CHECK(extract_answer("\nNiger") == "");
  CHECK(extract_answer("\t George Bush \r\n") == "George Bush");
  CHECK(extract_answer("\xC2\xA0" "Caf\xC3\xA9\xE3\x80\x80") == "Caf\xC3\xA9");  // U+00A0 / U+3000 stripped
  CHECK(extract_answer("") == "");
  // Python's str.strip() also removes U+001C..U+001F (information separators).
  CHECK(extract_answer("\x1c\x1f Niger\x1e") == "Niger");
}
