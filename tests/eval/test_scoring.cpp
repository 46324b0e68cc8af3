// test_scoring.cpp: TriviaQA normalization, EM and F1 against hand-computed cases (each also checked
// with the official triviaqa_evaluation.py functions under Python 3).
#include <doctest/doctest.h>

#include "eval/answer_normalize.h"

using tpshard::eval::exact_match_score;
using tpshard::eval::f1_score;
using tpshard::eval::normalize_answer;
using tpshard::eval::score_answer;

TEST_CASE("normalize_answer: articles, punctuation, underscores, white space") {
  CHECK(normalize_answer("The Beatles") == "beatles");
  CHECK(normalize_answer("  A  tale_of   Two Cities!! ") == "tale of two cities");
  CHECK(normalize_answer("an apple a day") == "apple day");
  CHECK(normalize_answer("Theatre") == "theatre");           // "the" inside a word stays
  CHECK(normalize_answer("the_end") == "end");               // '_' -> ' ' first, so "the" is a word
  CHECK(normalize_answer("a-b") == "b");                     // '-' -> ' ' makes "a" a word
  CHECK(normalize_answer("U.S.A.") == "u s");                // ... and "A" of U.S.A. is an article
  CHECK(normalize_answer("Campbell-Bannerman") == "campbell bannerman");  // punctuation -> space, not removed
  CHECK(normalize_answer("Sunset Blvd.") == "sunset blvd");
  CHECK(normalize_answer("Mr. T's") == "mr t s");
  CHECK(normalize_answer("1,000,000") == "1 000 000");
  CHECK(normalize_answer("") == "");
  CHECK(normalize_answer(" the a an ") == "");
}

TEST_CASE("normalize_answer: Unicode as Python str.lower / re / str.split do it") {
  CHECK(normalize_answer("ÉCOLE Normale") == "\xC3\xA9" "cole normale");         // É -> é
  CHECK(normalize_answer("\xC4\xB0stanbul") == "i\xCC\x87stanbul");               // İ -> i + U+0307
  CHECK(normalize_answer("\xCE\x9F\xCE\x94\xCE\x9F\xCE\xA3") == "\xCE\xBF\xCE\xB4\xCE\xBF\xCF\x82");  // ΟΔΟΣ -> οδος (final sigma)
  CHECK(normalize_answer("\xCE\xA3\xCE\x91\xCE\xA3.") == "\xCF\x83\xCE\xB1\xCF\x82");  // ΣΑΣ. -> σας
  CHECK(normalize_answer("\xCE\xA9mega") == "\xCF\x89mega");                      // Ωmega -> ωmega
  // U+2163 (Roman numeral four, category Nl) is cased, so the sigma before it is not final: eⅣΣ -> eⅳς,
  // but ΣⅣ -> σⅳ.
  CHECK(normalize_answer("e\xE2\x85\xA3\xCE\xA3") == "e\xE2\x85\xB3\xCF\x82");
  CHECK(normalize_answer("e\xCE\xA3\xE2\x85\xA3") == "e\xCF\x83\xE2\x85\xB3");
  // Ill-formed UTF-8: one U+FFFD per maximal subpart, as bytes.decode("utf-8", "replace") (CPython:
  // "caf\ufffd x"); U+001C is white space to str.split() ("a\x1cb" -> "a b" -> "b" after the article).
  CHECK(normalize_answer("caf\xE2\x82 x") == "caf\xEF\xBF\xBD x");
  CHECK(normalize_answer("a\x1c" "b") == "b");
  CHECK(normalize_answer("\xC3\x9F") == "\xC3\x9F");                               // ß unchanged by lower()
  // U+2018/U+2019 are removed like ASCII punctuation; U+201C/U+201D and U+00A1 are not.
  CHECK(normalize_answer("\xE2\x80\x98Quoted\xE2\x80\x99 \xE2\x80\x9C" "double\xE2\x80\x9D") ==
        "quoted \xE2\x80\x9C" "double\xE2\x80\x9D");
  CHECK(normalize_answer("\xC2\xA1Hola!") == "\xC2\xA1hola");
  // U+00A0 and U+3000 are white space for str.split().
  CHECK(normalize_answer("caf\xC3\xA9\xC2\xA0" "au\xE3\x80\x80lait") == "caf\xC3\xA9 au lait");
  // A combining mark is not a word character for re: "the" + U+0301 is still the article.
  CHECK(normalize_answer("the\xCC\x81 x") == "\xCC\x81 x");
  // Fullwidth A lowers to fullwidth a, which is not the ASCII article.
  CHECK(normalize_answer("\xEF\xBC\xA1 the") == "\xEF\xBD\x81");
}

TEST_CASE("exact match and F1, single ground truth") {
  CHECK(exact_match_score("The Beatles!", "beatles") == 1.0);
  CHECK(exact_match_score("Beatles band", "beatles") == 0.0);
  // pred {big, red, dog}, gold {red, dog}: P = 2/3, R = 1 -> F1 = 0.8
  CHECK(f1_score("the big red dog", "a red dog") == doctest::Approx(0.8));
  // multiset overlap: pred {red, red, dog}, gold {red, dog, dog}: common 2 -> P = R = 2/3
  CHECK(f1_score("red red dog", "red dog dog") == doctest::Approx(2.0 / 3.0));
  CHECK(f1_score("Paris France", "Paris") == doctest::Approx(2.0 / 3.0));
  CHECK(f1_score("London", "Paris") == 0.0);
  CHECK(f1_score("", "Paris") == 0.0);
  CHECK(f1_score("The", "A") == 0.0);          // both normalize to "": no shared token -> 0
  CHECK(exact_match_score("The", "A") == 1.0);  // ... but equal strings
}

TEST_CASE("best over aliases") {
  std::vector<std::string> aliases = {"Sir Henry Campbell-Bannerman", "Campbell-Bannerman", "campbellbannerman"};
  auto s = score_answer("Henry Campbell Bannerman", aliases);
  CHECK(s.exact_match == 0.0);
  // vs "sir henry campbell bannerman": 3 common, P = 1, R = 3/4 -> 6/7
  CHECK(s.f1 == doctest::Approx(6.0 / 7.0));
  auto t = score_answer("Campbell Bannerman.", aliases);
  CHECK(t.exact_match == 1.0);
  CHECK(t.f1 == 1.0);
  auto none = score_answer("anything", {});
  CHECK(none.exact_match == 0.0);
  CHECK(none.f1 == 0.0);
}
