// test_behaviour.cpp: special tokens in text, empty input, 1 MB inputs in bounded time, invalid
// UTF-8, unsupported components, unknown ids, BOS/EOS facts, StreamDecoder against decode(),
// tokenizer.json vs tokenizer.model agreement for Llama 2, and concurrent encode.
#include <doctest/doctest.h>

#include <chrono>
#include <ctime>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <unistd.h>

#include "format/error.h"
#include "tests/tokenizer/fixtures.h"
#include "tokenizer/config_files.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using tpshard::test::fixture;
using tpshard::test::shared_fixture;
using Ids = std::vector<int32_t>;

const tpshard::Tokenizer& gpt2() {
  static const auto t = tpshard::Tokenizer::load(fixture("gpt2"));
  return *t;
}
const tpshard::Tokenizer& neox() {
  static const auto t = tpshard::Tokenizer::load(fixture("gpt-neox-20b"));
  return *t;
}
const tpshard::Tokenizer& llama_json() {
  static const auto t = tpshard::Tokenizer::load(fixture("llama2"));
  return *t;
}
const tpshard::Tokenizer& llama_spm() {
  static const auto t = tpshard::SpmTokenizer::from_file(fixture("llama2/tokenizer.model"), tpshard::TokenizerSideConfig{});
  return *t;
}
std::vector<const tpshard::Tokenizer*> all_tokenizers() { return {&gpt2(), &neox(), &llama_json(), &llama_spm()}; }

// Deterministic pseudo-English: words drawn from a small list with punctuation and newlines.
std::string pseudo_text(size_t bytes, uint32_t seed) {
  static const char* words[] = {"the", "of", "tensor", "parallel", "shard", "rank", "model", "weights", "Hello",
                                "world", "isn't", "they'll", "2024", "3.14", "naïve", "café", "über", "日本語",
                                "🦙", "--", "(x)", "don't", "GPU", "H200", "all_reduce", "kv_cache"};
  std::mt19937 rng(seed);
  std::string out;
  while (out.size() < bytes) {
    out += words[rng() % (sizeof(words) / sizeof(words[0]))];
    const uint32_t r = rng() % 20;
    out += r == 0 ? "\n" : r == 1 ? ", " : r == 2 ? ".  " : " ";
  }
  return out;
}

std::string write_tokenizer_json(const std::string& name, const std::string& json) {
  const auto dir = std::filesystem::temp_directory_path() / ("tpshard_tok_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << json;
  return dir.string();
}

// A minimal valid tokenizer.json with one component replaced.
std::string minimal_json(const std::string& field, const std::string& value) {
  std::string normalizer = "null", pre = R"({"type":"ByteLevel","add_prefix_space":false})", post = "null",
              decoder = R"({"type":"ByteLevel"})";
  std::string model = R"({"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]})";
  if (field == "normalizer") normalizer = value;
  if (field == "pre_tokenizer") pre = value;
  if (field == "post_processor") post = value;
  if (field == "decoder") decoder = value;
  if (field == "model") model = value;
  return R"({"version":"1.0","added_tokens":[],"normalizer":)" + normalizer + R"(,"pre_tokenizer":)" + pre +
         R"(,"post_processor":)" + post + R"(,"decoder":)" + decoder + R"(,"model":)" + model + "}";
}

}  // namespace

TEST_CASE("special tokens written in the text are single ids, not split") {
  CHECK(gpt2().encode("a<|endoftext|>b", false) == Ids{64, 50256, 65});
  CHECK(neox().encode("<|endoftext|><|padding|>", false) == Ids{0, 1});
  CHECK(llama_json().encode("</s>", false) == Ids{2});
  CHECK(llama_json().encode("<s>", false) == Ids{1});
  CHECK(llama_spm().encode("</s>", false) == Ids{2});
  CHECK(llama_spm().encode("hi</s>", true) == Ids{1, 7251, 2});
  // decode keeps them unless asked to skip them.
  CHECK(gpt2().decode({64, 50256, 65}) == "a<|endoftext|>b");
  CHECK(gpt2().decode({64, 50256, 65}, true) == "ab");
  CHECK(gpt2().is_special(50256));
  CHECK_FALSE(gpt2().is_special(64));
}

TEST_CASE("empty input and empty id lists") {
  for (const auto* t : all_tokenizers()) {
    CHECK(t->encode("", false).empty());
    CHECK(t->decode({}).empty());
  }
  CHECK(llama_json().encode("", true) == Ids{1});
  CHECK(llama_spm().encode("", true) == Ids{1});
  CHECK(gpt2().encode("", true).empty());
}

TEST_CASE("BOS / EOS facts") {
  CHECK(llama_json().bos_id() == 1);
  CHECK(llama_json().eos_ids() == Ids{2});
  CHECK(llama_spm().bos_id() == 1);
  CHECK(llama_spm().eos_ids() == Ids{2});
  CHECK(gpt2().bos_id() == -1);
  CHECK(gpt2().eos_ids() == Ids{50256});
  CHECK(neox().eos_ids() == Ids{0});
  CHECK(gpt2().vocab_size() == 50257);
  CHECK(neox().vocab_size() == 50277);
  CHECK(llama_json().vocab_size() == 32000);
  CHECK(gpt2().token_to_id("<|endoftext|>") == 50256);
  CHECK(gpt2().id_to_token(50256) == "<|endoftext|>");
  CHECK(gpt2().id_to_token(612) == "\xC4\xA0\x74\x68\x65\x72\x65" /* "Ġthere" */);  // byte-level alphabet
  CHECK(llama_spm().token_to_id("\xE2\x96\x81the") == 278);
  CHECK(llama_spm().token_to_id("no such piece") == -1);
  if (std::filesystem::exists(shared_fixture("stories260K/tokenizer.json"))) {
    auto t = tpshard::Tokenizer::load(shared_fixture("stories260K"));
    CHECK(t->bos_id() == 1);
    CHECK(t->eos_ids() == Ids{2});
    CHECK(t->model_max_length() == 512);
    CHECK(t->encode("Once upon a time", true).front() == 1);
  }
}

TEST_CASE("1 MB inputs: bounded time, no quadratic slow-down") {
  // Pseudo-English, and one 1 MB "word" without spaces (no cache, no cuts: the heap merge path).
  auto no_spaces = [](size_t n) {
    std::string s;
    for (size_t i = 0; s.size() < n; ++i) s += static_cast<char>('a' + (i * 7 + i / 26) % 26);
    return s;
  };
  // Thread CPU time: the growth check should not depend on how busy the machine is.
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  auto seconds = [&](const tpshard::Tokenizer& t, const std::string& s, Ids& ids) {
    const double c0 = cpu_now();
    ids = t.encode(s, false);
    return cpu_now() - c0;
  };
  const std::vector<std::string> small = {pseudo_text(1 << 18, 7), no_spaces(1 << 18)};
  const std::vector<std::string> big = {pseudo_text(1 << 20, 7), no_spaces(1 << 20)};
  // libsentencepiece (tokenizer.model) is linear but slow (~1 MB/s): its growth is checked on
  // 64 KB -> 256 KB to keep the suite short.
  const std::vector<std::string> spm_small = {pseudo_text(1 << 16, 7), no_spaces(1 << 16)};
  for (const auto* t : all_tokenizers()) {
    const bool ours = t != &llama_spm();
    for (size_t k = 0; k < big.size(); ++k) {
      Ids ids_small, ids_big;
      const double t_small = seconds(*t, ours ? small[k] : spm_small[k], ids_small);
      const double t_big = seconds(*t, ours ? big[k] : small[k], ids_big);
      MESSAGE("encode x: " << t_small << " s, 4x: " << t_big << " s (CPU)");
      if (ours) CHECK(t_big < 5.0);
      CHECK(t_big < 12.0 * t_small + 0.1);  // 4x the input: linear ~4x (n log n, caches: up to ~8x), quadratic ~16x
      const std::string& input = ours ? big[k] : small[k];
      CHECK(ids_big.size() > input.size() / 16);
      CHECK(t->decode(ids_big).size() + 1 >= input.size());
    }
  }
  // Same ids from tokenizer.json (our heap merge) and tokenizer.model (spm) on the long word.
  CHECK(llama_json().encode(small[1], false) == llama_spm().encode(small[1], false));
}

TEST_CASE("invalid UTF-8 is replaced by U+FFFD (one per maximal subpart), never a crash") {
  CHECK(tpshard::utf8::sanitize("a\xFF" "b") == "a\xEF\xBF\xBD" "b");
  CHECK(tpshard::utf8::sanitize("\xF0\x9F\x98" "x") == "\xEF\xBF\xBD" "x");           // truncated 4-byte: one
  CHECK(tpshard::utf8::sanitize("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate: three
  CHECK(tpshard::utf8::sanitize("\xC0\xAF") == "\xEF\xBF\xBD\xEF\xBF\xBD");            // overlong
  for (const auto* t : all_tokenizers()) CHECK(t->encode("abc\xFF\xFE", false) == t->encode("abc\xEF\xBF\xBD\xEF\xBF\xBD", false));
  std::mt19937 rng(1);
  for (int k = 0; k < 300; ++k) {
    std::string s(rng() % 48, '\0');
    for (auto& c : s) c = static_cast<char>(rng() % 256);
    for (const auto* t : all_tokenizers()) {
      const Ids ids = t->encode(s, true);
      const std::string back = t->decode(ids);
      CHECK(tpshard::utf8::is_valid(back));
    }
  }
}

TEST_CASE("unknown ids in decode: Error naming the id") {
  for (const auto* t : all_tokenizers()) {
    const int32_t bad = static_cast<int32_t>(t->vocab_size()) + 5;
    try {
      t->decode({1, bad});
      FAIL("decode accepted an id outside the vocabulary");
    } catch (const tpshard::Error& e) {
      CHECK(std::string(e.what()).find(std::to_string(bad)) != std::string::npos);
      CHECK_FALSE(e.hint().empty());
    }
    CHECK_THROWS_AS(t->decode({-1}), tpshard::Error);
  }
}

TEST_CASE("unsupported components: Error naming the component type") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"normalizer", R"({"type":"BertNormalizer"})"},
      {"pre_tokenizer", R"({"type":"BertPreTokenizer"})"},
      {"post_processor", R"({"type":"RobertaProcessing"})"},
      {"decoder", R"({"type":"WordPiece"})"},
      {"model", R"({"type":"WordPiece","vocab":{"a":0}})"},
      {"model", R"({"type":"Unigram","vocab":[["a",0.0]]})"},
  };
  for (const auto& [field, value] : cases) {
    const std::string type = value.substr(9, value.find('"', 9) - 9);
    CAPTURE(type);
    const std::string dir = write_tokenizer_json(field + type, minimal_json(field, value));
    try {
      tpshard::Tokenizer::load(dir);
      FAIL("an unsupported component was accepted");
    } catch (const tpshard::Error& e) {
      CHECK(std::string(e.what()).find("'" + type + "'") != std::string::npos);
      CHECK(std::string(e.what()).find("tokenizer.json") != std::string::npos);
    }
    std::filesystem::remove_all(dir);
  }
  // A split pattern PCRE2 cannot compile: Error naming the file and the component.
  {
    const std::string dir = write_tokenizer_json(
        "badregex", minimal_json("pre_tokenizer", R"({"type":"Split","pattern":{"Regex":"(unclosed"},"behavior":"Isolated"})"));
    try {
      tpshard::Tokenizer::load(dir);
      FAIL("a broken regex was accepted");
    } catch (const tpshard::Error& e) {
      CHECK(std::string(e.what()).find("tokenizer.json: pre_tokenizer Split: regex does not compile") != std::string::npos);
    }
    std::filesystem::remove_all(dir);
  }
  // The minimal file itself loads and merges "a b".
  const std::string dir = write_tokenizer_json("ok", minimal_json("", ""));
  CHECK(tpshard::Tokenizer::load(dir)->encode("abba", false) == Ids{2, 1, 0});
  std::filesystem::remove_all(dir);
  CHECK_THROWS_AS(tpshard::Tokenizer::load("/nonexistent/dir"), tpshard::Error);
  CHECK_THROWS_AS(tpshard::Tokenizer::load(std::filesystem::temp_directory_path().string()), tpshard::Error);
}

TEST_CASE("StreamDecoder::prime: the output continues the prompt (decode(prompt + out) minus decode(prompt))") {
  const std::string prompt = "Lily saw", full = "Lily saw \xE2\x9C\x85 and a dog";
  for (const auto* t : all_tokenizers()) {
    const Ids p = t->encode(prompt, true), all = t->encode(full, true);
    REQUIRE(all.size() > p.size());
    REQUIRE(Ids(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(p.size())) == p);
    tpshard::StreamDecoder stream(*t, true);
    stream.prime(p);
    std::string out;
    for (size_t i = p.size(); i < all.size(); ++i) out += stream.push(all[i]);
    out += stream.flush();
    const std::string want = t->decode(all, true).substr(t->decode(p, true).size());
    CHECK(out == want);
    CHECK(out.rfind(" ", 0) == 0);  // Llama 2 style decoders strip a sequence's leading space; a continuation keeps it
  }
}

TEST_CASE("StreamDecoder: pushes concatenate to decode(), never half a character") {
  const std::string text = "emoji \xF0\x9F\xA6\x99 and rare \xF0\xA0\x80\x8B, \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xE2\x9C\x85 done.\n  Hello world";
  for (const auto* t : all_tokenizers()) {
    const Ids ids = t->encode(text, true);
    tpshard::StreamDecoder stream(*t, true);
    std::string joined;
    int held_back = 0;
    for (int32_t id : ids) {
      const std::string piece = stream.push(id);
      CHECK(tpshard::utf8::is_valid(piece));
      if (piece.empty()) ++held_back;
      joined += piece;
    }
    joined += stream.flush();
    CHECK(joined == t->decode(ids, true));
    CHECK(held_back > 0);  // the 4-byte characters span several tokens somewhere
  }
  // Llama 2: the rare characters really are byte-fallback tokens (<0x00>..<0xFF> = ids 3..258).
  const Ids ids = llama_json().encode(text, false);
  int byte_tokens = 0;
  for (int32_t id : ids) byte_tokens += id >= 3 && id <= 258;
  CHECK(byte_tokens >= 8);
  // An unknown id throws and leaves the stream usable.
  tpshard::StreamDecoder after_error(gpt2(), true);
  CHECK(after_error.push(15496) == "Hello");
  CHECK_THROWS_AS(after_error.push(999999), tpshard::Error);
  CHECK(after_error.push(995) == " world");
  // An incomplete character at the end comes out of flush() as U+FFFD.
  tpshard::StreamDecoder partial(llama_json(), true);
  CHECK(partial.push(0xF0 + 3).empty());  // <0xF0>: first byte of a 4-byte sequence
  CHECK(partial.flush() == "\xEF\xBF\xBD");
}

TEST_CASE("Llama 2: tokenizer.json and tokenizer.model agree on varied text") {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const std::string s = pseudo_text(400 + seed * 50, seed);
    CAPTURE(s);
    CHECK(llama_json().encode(s, true) == llama_spm().encode(s, true));
    CHECK(llama_json().decode(llama_spm().encode(s, true), true) == llama_spm().decode(llama_spm().encode(s, true), true));
  }
}

TEST_CASE("concurrent encode from several threads gives the same ids") {
  const std::string text = pseudo_text(200000, 3);
  const Ids expected = neox().encode(text, false);
  std::vector<Ids> got(4);
  std::vector<std::thread> threads;
  for (size_t k = 0; k < got.size(); ++k) threads.emplace_back([&, k] { got[k] = neox().encode(text, false); });
  for (auto& th : threads) th.join();
  for (const auto& g : got) CHECK(g == expected);
}

TEST_CASE("tokenizer_config.json add_bos_token overrides the post-processor template") {
  namespace fs = std::filesystem;
  auto make_dir = [](const std::string& name, const std::string& src, const std::string& config) {
    const fs::path dir = fs::temp_directory_path() / ("tpshard_tok_cfg_" + name + "_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    fs::copy_file(fixture(src + "/tokenizer.json"), dir / "tokenizer.json", fs::copy_options::overwrite_existing);
    std::ofstream(dir / "tokenizer_config.json") << config;
    return dir;
  };
  const fs::path no_bos = make_dir("nobos", "llama2", R"({"add_bos_token": false, "bos_token": "<s>", "eos_token": "</s>"})");
  auto llama = tpshard::Tokenizer::load(no_bos.string());
  CHECK(llama->encode("Hello", true) == Ids{15043});
  CHECK(llama->bos_id() == 1);
  const fs::path with_bos = make_dir("bos", "gpt2",
      R"({"add_bos_token": true, "bos_token": {"content": "<|endoftext|>", "special": true}, "model_max_length": 1024})");
  auto g = tpshard::Tokenizer::load(with_bos.string());
  CHECK(g->encode("Hello", true) == Ids{50256, 15496});
  CHECK(g->encode("Hello", false) == Ids{15496});
  CHECK(g->bos_id() == 50256);
  CHECK(g->model_max_length() == 1024);
  fs::remove_all(no_bos);
  fs::remove_all(with_bos);
}

TEST_CASE("a tokenizer_config.json that is valid JSON but not an object is refused, naming the file") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("tpshard_tok_cfg_array_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(fixture("gpt2/tokenizer.json"), dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  std::ofstream(dir / "tokenizer_config.json") << "[1, 2]";
  try {
    tpshard::Tokenizer::load(dir.string());
    FAIL("loaded a tokenizer with an array as tokenizer_config.json");
  } catch (const tpshard::Error& e) {
    CHECK(std::string(e.what()) ==
          (dir / "tokenizer_config.json").string() + ": is a JSON array, not an object");
  }
  fs::remove_all(dir);
}

TEST_CASE("SentencePiece: tokenizer_config added_tokens_decoder pieces are matched in text (InternLM2's <|im_start|>)") {
  // A normal piece of the Llama 2 model without "▁", declared as an added special token the way
  // InternLM2's tokenizer_config.json declares <|im_start|>: matched whole, wherever it appears.
  const auto& plain = llama_spm();
  int32_t id = -1;
  std::string piece;
  for (int32_t i = 300; i < 2000 && id < 0; ++i) {
    const std::string p = plain.id_to_token(i);
    if (p.size() >= 3 && p.find("\xe2\x96\x81") == std::string::npos && p.find('<') == std::string::npos) {
      id = i;
      piece = p;
    }
  }
  REQUIRE(id >= 0);
  tpshard::TokenizerSideConfig side;
  tpshard::AddedToken tok;
  tok.id = id;
  tok.content = piece;
  tok.special = true;
  side.added_tokens.push_back(tok);
  const auto t = tpshard::SpmTokenizer::from_file(fixture("llama2/tokenizer.model"), side);
  const std::string text = "zq" + piece + "zq";
  const Ids ids = t->encode(text, false);
  CAPTURE(piece);
  // the text before it, the piece as one token, the text after it (each segment encoded alone)
  Ids expected = plain.encode("zq", false);
  expected.push_back(id);
  const Ids after = plain.encode("zq", false);
  expected.insert(expected.end(), after.begin(), after.end());
  CHECK(ids == expected);
  CHECK(t->is_special(id));
  CHECK_FALSE(plain.is_special(id));
  CHECK(t->decode(ids, true).find(piece) == std::string::npos);
}
