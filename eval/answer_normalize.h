// answer_normalize.h: TriviaQA answer scoring exactly as the official evaluation script does it
// (mandarjoshi90/triviaqa evaluation/triviaqa_evaluation.py, itself extended from SQuAD v1.1's).
// Owns: normalize_answer, exact match, token F1, best-over-aliases. Does not own: answer extraction
// from generated text (eval/fewshot_prompt.h) or aggregation over a data set (eval/triviaqa_eval.h).
#pragma once
#include <string>
#include <vector>

namespace tpshard::eval {

/// The official TriviaQA normalization of a UTF-8 string, in the official order:
///   1. '_' -> ' '
///   2. lower case as Python's str.lower() (full Unicode mapping: U+0130 -> "i\u0307", Greek final sigma)
///   3. each of string.punctuation (the 32 ASCII punctuation marks) and U+2018 U+2019 U+00B4 U+0060 -> ' '
///      (other Unicode punctuation, e.g. U+201C, is kept, as in the official script)
///   4. the words a / an / the (Python re \b(a|an|the)\b on str: Unicode word boundaries) -> ' '
///   5. split on Python white space (str.split(): utf8::is_python_space, incl. U+001C..U+001F, U+00A0, U+3000)
///      and join with ' '
/// Ill-formed UTF-8 is read as Python's decode(errors="replace") does: one U+FFFD per maximal subpart.
std::string normalize_answer(const std::string& text);

/// 1 when normalize_answer(prediction) == normalize_answer(ground_truth), else 0.
double exact_match_score(const std::string& prediction, const std::string& ground_truth);

/// Token F1 over the whitespace tokens of the normalized strings (multiset overlap, as
/// collections.Counter &): 2PR/(P+R); 0 when no token is shared (also when both are empty).
double f1_score(const std::string& prediction, const std::string& ground_truth);

/// Scores of one prediction: each the maximum over ground_truths (0 when ground_truths is empty).
struct AnswerScore {
  double exact_match = 0;  ///< 0 or 1
  double f1 = 0;           ///< in [0, 1]
};
AnswerScore score_answer(const std::string& prediction, const std::vector<std::string>& ground_truths);

}  // namespace tpshard::eval
