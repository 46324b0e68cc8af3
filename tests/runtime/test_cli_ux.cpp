// test_cli_ux.cpp: tprun CLI fixes from a new-user test, on the binary: a global option given after
// the subcommand is named with the corrected command line; a mistyped option names the closest one;
// `--stop ""`, `eval --limit 0` and a JSONL line's negative "seed" or empty "stop" are refused;
// `--device cuda` with no usable GPU (a CUDA build under CUDA_VISIBLE_DEVICES="") says so; usage errors
// exit 2 in tprun and tpshard alike, tprun's own (a missing or conflicting option) too; --version exits 0;
// chat takes one --prompt, and an unquoted text after --prompt is named with the quoted command line.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "tests/runtime/cli_run.h"

namespace {

using UxRun = tpshard::test::CliRun;

/// Runs `env tprun args` through the shell (env: "VAR=value " assignments or empty).
UxRun run_tprun(const std::string& args, const std::string& env = "") {
  return tpshard::test::run_tprun(args, std::string(TPSHARD_TEST_OUT_DIR) + "/cli-ux", env);
}

/// stories260K converted for tp 1 and 2 (its own copy: test cases may run in any order).
std::string ux_model_dir() {
  std::filesystem::create_directories(TPSHARD_TEST_OUT_DIR);
  const std::string out = std::string(TPSHARD_TEST_OUT_DIR) + "/cli-ux-stories260K";
  const std::string cmd = std::string(TPSHARD_BIN_DIR) + "/tpshard convert " + TPSHARD_FIXTURES_DIR +
                          "/stories260K -o " + out + " --tp 1,2 --force -q >/dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  return out;
}

bool has_eval() { return run_tprun("--help").out.find("\n  eval ") != std::string::npos; }

}  // namespace

TEST_CASE("tprun: a global option after the subcommand is named, with the corrected command line") {
  const std::string m = "/nonexistent-model";  // the parse fails before the model directory is looked at
  struct Case {
    std::string args, error, hint;
  };
  const Case cases[] = {
      {m + " generate --prompt hi --tp 2", "--tp is a tprun option: put it before 'generate'",
       "`tprun " + m + " --tp 2 generate --prompt hi`"},
      {m + " generate --device=cpu --prompt 'a b'", "--device is a tprun option: put it before 'generate'",
       "`tprun " + m + " --device=cpu generate --prompt 'a b'`"},
      {m + " --tp 1 logits --ids 1 --no-verify", "--no-verify is a tprun option: put it before 'logits'",
       "`tprun " + m + " --tp 1 --no-verify logits --ids 1`"},
      {m + " generate --max-batch 4 --prompt hi", "--max-batch is a tprun option: put it before 'generate'",
       "`tprun " + m + " --max-batch 4 generate --prompt hi`"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.args);
    const UxRun r = run_tprun(c.args);
    CHECK(r.code == 2);
    CHECK(r.err == "error: " + c.error + "\nhint: " + c.hint + "\n");
    CHECK(r.out.empty());
  }
  if (has_eval()) {
    const UxRun r = run_tprun(m + " eval triviaqa --data x --threads 1");
    CHECK(r.code == 2);
    CHECK(r.err == "error: --threads is a tprun option: put it before 'eval'\nhint: `tprun " + m +
                       " --threads 1 eval triviaqa --data x`\n");
  }
}

TEST_CASE("tprun: a mistyped option names the closest option of the subcommand") {
  const std::string m = "/nonexistent-model";
  UxRun r = run_tprun(m + " generate --promt hi");
  CHECK(r.code == 2);
  CHECK(r.err == "error: tprun MODEL_DIR generate: unknown option --promt\n"
                 "hint: did you mean --prompt? (`tprun MODEL_DIR generate --help` lists the options)\n");
  r = run_tprun(m + " --tpp 2 generate --prompt hi");  // at the top level
  CHECK(r.code == 2);
  CHECK(r.err == "error: tprun MODEL_DIR: unknown option --tpp\n"
                 "hint: did you mean --tp? (`tprun MODEL_DIR --help` lists the options)\n");
  r = run_tprun(m + " generate --prompt hi --qqqqqqqqqq");
  CHECK(r.code == 2);
  CHECK(r.err == "error: tprun MODEL_DIR generate: unknown option --qqqqqqqqqq\n"
                 "hint: `tprun MODEL_DIR generate --help` lists the options\n");
}

TEST_CASE("tprun and tpshard: a usage error exits 2 in both tools; --help (and tpshard --version) exit 0") {
  const std::string dir = std::string(TPSHARD_TEST_OUT_DIR) + "/cli-ux-codes";
  auto run = [&](const std::string& tool, const std::string& args) { return tpshard::test::run_tool(tool, args, dir); };
  struct Case {
    std::string tool, args, err_start;
  };
  const Case usage_errors[] = {
      {"tprun", "/nonexistent-model generate --promt hi", "error: tprun MODEL_DIR generate: unknown option --promt\n"},
      {"tpshard", "inspect /nonexistent-model --zzzzzzzz", "error: tpshard inspect: unknown option --zzzzzzzz\n"},
      {"tprun", "/nonexistent-model --tp 0 generate --prompt hi",
       "error: --tp: must be > 0, got 0\nhint: `tprun --help` lists the options\n"},  // a global option
      {"tpshard", "inspect /nonexistent-model --tp 0",
       "error: --tp: must be > 0, got 0\nhint: `tpshard inspect --help` lists the options\n"},  // CLI11: 105
      {"tpshard", "convert " + std::string(TPSHARD_FIXTURES_DIR) + "/stories260K", "error: --out is required\n"},  // 106
      {"tpshard", "inspect /nonexistent-model --rank 1", "error: --rank requires --tensors\n"},  // CLI11: 107
      {"tpshard", "frobnicate", "error: tpshard: unknown subcommand 'frobnicate'\n"},
  };
  for (const Case& c : usage_errors) {
    CAPTURE(c.tool + " " + c.args);
    const UxRun r = run(c.tool, c.args);
    CHECK(r.code == 2);
    CHECK_MESSAGE(r.err.rfind(c.err_start, 0) == 0, r.err);
    CHECK(r.out.empty());
  }
  for (const std::string tool : {"tprun", "tpshard"}) {
    CAPTURE(tool);
    const UxRun r = run(tool, "--help");
    CHECK(r.code == 0);
    CHECK(r.out.find("Usage:") != std::string::npos);
  }
  const UxRun v = run("tpshard", "--version");
  CHECK(v.code == 0);
  CHECK_FALSE(v.out.empty());
}

TEST_CASE("tprun: its own usage errors (a missing or conflicting option) exit 2, errors about inputs 1") {
  const std::string m = ux_model_dir() + " --device cpu";
  const std::string dir = std::string(TPSHARD_TEST_OUT_DIR) + "/cli-ux-own-usage";
  std::filesystem::create_directories(dir);
  const std::string in = dir + "/in.jsonl", out = dir + "/out.jsonl";
  std::ofstream(in) << "{\"id\": 1, \"prompt\": \"x\"}\n";
  struct Case {
    std::string args, err_start;
    int code;
  };
  std::vector<Case> cases = {
      // found by tprun after CLI11 parsed the line: usage, 2 (as CLI11's own, e.g. a required option)
      {m + " generate", "error: generate: no prompt\nhint: pass --prompt", 2},
      {m + " generate --input " + in, "error: generate: --input and --output go together\n", 2},
      {m + " generate --output " + out, "error: generate: --input and --output go together\n", 2},
      {m + " generate --prompt x --input " + in + " --output " + out,
       "error: generate: --prompt cannot be combined with --input\n", 2},
      {m + " generate --prompt x --min-new-tokens 10 --max-new-tokens 5",
       "error: generate: --min-new-tokens 10 is greater than --max-new-tokens 5\n", 2},
      {m + " logits", "error: logits: pass --ids or --text\n", 2},
      {m + " tokenize", "error: tokenize: pass --text or --file\n", 2},
      {m + " chat", "error: chat: pass --prompt TEXT or --messages FILE\n", 2},
      // chat answers one message; a text split by the shell is named with the quoted command line
      {m + " chat --prompt a --prompt b",
       "error: chat: --prompt given 2 times; chat answers one user message\nhint: for a conversation, pass --messages FILE "
       "(a JSON list of {\"role\", \"content\"}); for independent prompts, `tprun MODEL generate --prompt A --prompt B`\n",
       2},
      {m + " chat --prompt Hi there",
       "error: 'there' is not an option or a value: --prompt takes one value ('Hi'); a text with spaces needs quotes\n"
       "hint: `tprun " + m + " chat --prompt 'Hi there'`\n",
       2},
      {m + " generate --prompt Once upon a --max-new-tokens 3",
       "error: 'upon' is not an option or a value: --prompt takes one value ('Once'); a text with spaces needs quotes\n"
       "hint: `tprun " + m + " generate --prompt 'Once upon a' --max-new-tokens 3`\n",
       2},
      {m + " chat --messages " + dir + "/missing.json", "error: chat --messages: cannot open " + dir + "/missing.json\n", 1},
      // what an input holds (or a missing file): 1
      {m + " generate --input " + dir + "/missing.jsonl --output " + out,
       "error: generate --input " + dir + "/missing.jsonl: no such file\n", 1},
      // a malformed --ids list: usage, 2
      {m + " logits --ids 1,x", "error: logits --ids: \"x\" is not a token id (an integer in 0..2147483647)\n", 2},
      {m + " detokenize --ids 1,abc", "error: detokenize --ids: \"abc\" is not a token id (an integer in 0..2147483647)\n", 2},
      {m + " logits --ids ''", "error: logits --ids: no ids given\n", 2},
      {m + " logits --ids 1,", "error: logits --ids: has an empty item in '1,'\n", 2},
      {m + " detokenize --ids 1,,2", "error: detokenize --ids: has an empty item in '1,,2'\n", 2},
      {m + " logits --ids 1,999999", "error: logits --ids: token id 999999 is outside the vocabulary of ", 1},
      {m + " tokenize --file " + dir + "/missing.txt", "error: tokenize --file " + dir + "/missing.txt: no such file\n", 1},
      {m + " tokenize --file " + dir, "error: tokenize --file " + dir + ": is a directory, not a file\n", 1},
  };
  if (has_eval()) cases.push_back({m + " eval triviaqa", "error: --data is required\n", 2});
  for (const Case& c : cases) {
    CAPTURE(c.args);
    const UxRun r = run_tprun(c.args);
    CHECK(r.code == c.code);
    CHECK_MESSAGE(r.err.rfind(c.err_start, 0) == 0, r.err);
    CHECK(r.out.empty());
  }
  CHECK_FALSE(std::filesystem::exists(out));
  // --version before the model directory, as in tpshard: the version, exit 0.
  const UxRun v = run_tprun("--version");
  CHECK(v.code == 0);
  CHECK(v.err.empty());
  const UxRun t = tpshard::test::run_tool("tpshard", "--version", dir);
  REQUIRE(t.code == 0);
  // the same first line ("0.1.0 (commit ...)"); tprun adds the backends of the build
  CHECK(v.out.substr(0, v.out.find('\n')) == t.out.substr(0, t.out.find('\n')));
  CHECK(t.out.find(" (commit ") != std::string::npos);
  CHECK(v.out.find("\nbackends: cpu (fp32)") != std::string::npos);
}

TEST_CASE("tprun: a model directory without a tokenizer is refused before any weight loads (generate, chat, eval, "
          "logits --text)") {
  namespace fs = std::filesystem;
  const std::string dir = std::string(TPSHARD_TEST_OUT_DIR) + "/cli-ux-no-tokenizer";
  fs::remove_all(dir);
  fs::copy(ux_model_dir(), dir, fs::copy_options::recursive);
  for (const char* f : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json"}) fs::remove(fs::path(dir) / f);
  std::ofstream(dir + "/q.jsonl") << "{\"question\": \"q\", \"answer\": {\"aliases\": [\"a\"]}}\n";
  std::vector<std::string> commands = {"generate --prompt x", "chat --prompt x", "logits --text x"};
  if (has_eval()) commands.push_back("eval triviaqa --data " + dir + "/q.jsonl --shots 0 --output " + dir + "/p.jsonl");
  for (const std::string& c : commands) {
    CAPTURE(c);
    const UxRun r = run_tprun(dir + " --device cpu " + c);
    CHECK(r.code == 1);
    CHECK_MESSAGE(r.err.find("error: " + dir + ": the model directory has no tokenizer.json or tokenizer.model\n") !=
                      std::string::npos, r.err);
    CHECK_MESSAGE(r.err.find("tprun: backend") == std::string::npos, r.err);  // refused before loading
    CHECK(r.out.empty());
  }
  CHECK_FALSE(fs::exists(dir + "/p.jsonl"));
  // logits --ids needs no tokenizer
  const UxRun ids = run_tprun(dir + " --device cpu logits --ids 1,2");
  CHECK(ids.code == 0);
  CHECK(ids.out.rfind("{\"ids\":[1,2],\"logits\":[", 0) == 0);
}

TEST_CASE("tprun: a tokenizer with more tokens than the model's vocab_size (another model's) is refused before loading") {
  namespace fs = std::filesystem;
  const std::string dir = std::string(TPSHARD_TEST_OUT_DIR) + "/cli-ux-other-tokenizer";
  fs::remove_all(dir);
  fs::copy(ux_model_dir(), dir, fs::copy_options::recursive);
  fs::remove(fs::path(dir) / "tokenizer_config.json");
  fs::copy_file(std::string(TPSHARD_FIXTURES_DIR) + "/smollm2/tokenizer.json", dir + "/tokenizer.json",
                fs::copy_options::overwrite_existing);  // SmolLM2's 49,152 tokens on stories260K's 512
  for (const std::string c : {"--device cpu generate --prompt x", "--device cpu logits --text x", "tokenize --text x",
                              "detokenize --ids 5"}) {
    CAPTURE(c);
    const UxRun r = run_tprun(dir + " " + c);
    CHECK(r.code == 1);
    CHECK_MESSAGE(r.err.rfind("error: " + dir + "/tokenizer.json: the tokenizer has 49152 tokens, more than the "
                              "model's vocab_size 512: it belongs to another model\nhint: copy the tokenizer files",
                              0) == 0,
                  r.err);
    CHECK(r.out.empty());
  }
}

TEST_CASE("tprun: endless input (/dev/zero) is refused after a bounded read, not read until memory runs out") {
  const std::string dir = ux_model_dir();
  UxRun r = run_tprun(dir + " tokenize --file /dev/zero");
  CHECK(r.code == 1);
  CHECK(r.err == "error: tokenize --file /dev/zero: more than 256 MiB of text\n"
                 "hint: tokenize a regular file of at most 256 MiB (split larger texts into parts)\n");
  r = run_tprun(dir + " --device cpu generate --input /dev/zero --output " + dir + "/zero.jsonl");
  CHECK(r.code == 1);
  CHECK(r.err == "error: /dev/zero:1: line longer than 64 MiB (not a JSON Lines file?)\n"
                 "hint: give a JSON Lines file: one JSON object per line\n");
  CHECK_FALSE(std::filesystem::exists(dir + "/zero.jsonl"));
}

TEST_CASE("tprun: shards in another dtype than manifest.json's \"dtype\" (edited after conversion) are refused") {
  namespace fs = std::filesystem;
  const std::string dir = std::string(TPSHARD_TEST_OUT_DIR) + "/cli-ux-dtype-edit";
  fs::remove_all(dir);
  fs::copy(ux_model_dir(), dir, fs::copy_options::recursive);
  std::ifstream in(dir + "/manifest.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string key = "\"dtype\": \"";
  const std::size_t at = text.find(key);
  REQUIRE(at != std::string::npos);
  const std::size_t end = text.find('"', at + key.size());
  const std::string dtype = text.substr(at + key.size(), end - at - key.size());
  const std::string other = dtype == "bf16" ? "f16" : "bf16";
  text.replace(at + key.size(), dtype.size(), other);
  std::ofstream(dir + "/manifest.json", std::ios::trunc) << text;
  const UxRun r = run_tprun(dir + " --device cpu generate --prompt x --max-new-tokens 2");
  CHECK(r.code == 1);
  CHECK_MESSAGE(r.err.find(" is " + dtype + ", manifest.json's \"dtype\" says " + other + "\n") != std::string::npos, r.err);
  CHECK(r.out.empty());
}

TEST_CASE("tprun: a manifest model section edited after conversion (its hash line removed) is refused, not run") {
  namespace fs = std::filesystem;
  const std::string dir = std::string(TPSHARD_TEST_OUT_DIR) + "/cli-ux-layers-edit";
  fs::remove_all(dir);
  fs::copy(ux_model_dir(), dir, fs::copy_options::recursive);
  nlohmann::json m;
  std::ifstream(dir + "/manifest.json") >> m;
  m.erase("model_section_xxh3");
  m["model"]["num_hidden_layers"] = 3;  // the shards hold 5
  std::ofstream(dir + "/manifest.json", std::ios::trunc) << m.dump(1);
  for (const std::string tp : {"1", "2"}) {
    const UxRun r = run_tprun(dir + " --device cpu --tp " + tp + " generate --prompt x --max-new-tokens 2");
    CHECK(r.code == 1);
    CHECK_MESSAGE(r.err.find(".tps: holds tensor blk.3.attn_norm.weight, which manifest.json's model section "
                             "(num_hidden_layers 3, hidden_size 64) does not call for\n") != std::string::npos,
                  r.err);
    CHECK(r.out.empty());
  }
}

TEST_CASE("tprun refuses an empty --stop and eval --limit 0 before loading") {
  const std::string dir = ux_model_dir();
  for (const std::string c : {"'' --device cpu generate --prompt x", "'' tokenize --text x"}) {  // an empty MODEL_DIR
    CAPTURE(c);
    const UxRun e = run_tprun(c);
    CHECK(e.code == 1);
    CHECK(e.err.rfind("error: the model directory path is empty\n", 0) == 0);
  }
  UxRun r = run_tprun(dir + " --device cpu generate --prompt x --stop ''");
  CHECK(r.code == 2);
  CHECK(r.err.rfind("error: --stop: must not be empty\n", 0) == 0);
  CHECK(r.out.empty());
  if (has_eval()) {
    r = run_tprun(dir + " --device cpu eval triviaqa --data x --limit 0");
    CHECK(r.code == 2);
    CHECK(r.err.rfind("error: --limit: must be an integer in 1..9223372036854775807 (a run scores at least one question), "
                      "got 0\n",
                      0) == 0);
  }
}

TEST_CASE("tprun generate --input: a negative \"seed\" or an empty \"stop\" on a line is refused, naming FILE:LINE") {
  const std::string dir = ux_model_dir();
  const std::string tmp = std::string(TPSHARD_TEST_OUT_DIR) + "/cli-ux-jsonl";
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);
  struct Case {
    std::string line, message;
  };
  const Case cases[] = {
      {R"({"prompt": "x", "seed": -3})", R"(:2: "seed" is -3, expected an integer in 0..18446744073709551615)"},
      {R"({"prompt": "x", "seed": 1.5})", R"(:2: "seed" is 1.5 (a number with a fraction), expected an integer in 0..18446744073709551615)"},
      {R"({"prompt": "x", "stop": ""})", R"(:2: "stop" is an empty string)"},
      {R"({"prompt": "x", "stop": ["a", ""]})", R"(:2: "stop" holds an empty string)"},
  };
  const std::string input = tmp + "/in.jsonl";
  for (const Case& c : cases) {
    CAPTURE(c.line);
    std::ofstream(input) << "{\"prompt\": \"Once\", \"seed\": 18446744073709551615}\n" << c.line << "\n";
    const UxRun r = run_tprun(dir + " --device cpu generate --max-new-tokens 2 --input " + input + " --output " +
                              tmp + "/out.jsonl");
    CHECK(r.code == 1);
    CHECK_MESSAGE(r.err.find(input + c.message + "\n") != std::string::npos, r.err);
    CHECK_FALSE(std::filesystem::exists(tmp + "/out.jsonl"));  // checked before generating anything
  }
}

TEST_CASE("tprun --device cuda with no usable GPU says so and hints --device cpu / auto") {
  const std::string dir = ux_model_dir();
  const UxRun r = run_tprun(dir + " --device cuda generate --prompt x --max-new-tokens 1", "CUDA_VISIBLE_DEVICES= ");
  CHECK(r.code == 1);
  if (r.err.find("built without the CUDA backend") != std::string::npos) return;  // CPU build: its own message
  CHECK(r.err ==
        "error: --device cuda: no usable GPU on this machine (the CUDA runtime sees none: no GPU, no driver, a driver "
        "older than this build's CUDA, or CUDA_VISIBLE_DEVICES hides them all)\n"
        "hint: --device cpu (or auto, which picks the CPU when no GPU is usable); `nvidia-smi` shows the GPUs and "
        "the driver\n");
  // auto picks the CPU there.
  const UxRun a = run_tprun(dir + " --device auto generate --prompt x --max-new-tokens 1", "CUDA_VISIBLE_DEVICES= ");
  CHECK_MESSAGE(a.code == 0, a.err);
  CHECK(a.err.find("backend cpu") != std::string::npos);
}

TEST_CASE("tprun without --tp: tp 1 when converted, else the only tp size (named), else a usage error listing them") {
  const std::string base = std::string(TPSHARD_TEST_OUT_DIR) + "/cli-ux-default-tp";
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base);
  for (const std::string& tps : {std::string("2"), std::string("2,4")}) {
    const std::string cmd = std::string(TPSHARD_BIN_DIR) + "/tpshard convert " + TPSHARD_FIXTURES_DIR +
                            "/stories260K -o " + base + "/tp" + tps + " --tp " + tps + " -q >/dev/null";
    REQUIRE(std::system(cmd.c_str()) == 0);
  }
  const UxRun one = run_tprun(base + "/tp2 --device cpu generate --prompt Once --max-new-tokens 3");
  CHECK(one.code == 0);
  CHECK(one.err.find("tprun: --tp not given: using tp 2, the only tp size of " + base + "/tp2\n") != std::string::npos);
  CHECK(one.err.find("tp_size 2") != std::string::npos);
  const UxRun two = run_tprun(base + "/tp2,4 --device cpu generate --prompt Once --max-new-tokens 3");
  CHECK(two.code == 2);
  CHECK(two.err == "error: " + base + "/tp2,4 has no tp 1 layout, and several others (tp 2, 4): --tp is needed\n"
                   "hint: pass --tp with one of 2, 4 (tp 2, 4)\n");
}

TEST_CASE("tprun SUBCOMMAND --help without a model directory prints that subcommand's help") {
  for (const std::string sub : {"generate", "logits"}) {
    const UxRun r = run_tprun(sub + " --help");
    CHECK(r.code == 0);
    CHECK(r.out.find("\nUsage: tprun MODEL_DIR " + sub + " [OPTIONS]") != std::string::npos);
    CHECK(r.out.find("MODEL_DIR TEXT REQUIRED") == std::string::npos);  // not the top-level help
  }
  if (has_eval()) {  // a nested subcommand: its own help, not its parent's
    const UxRun r = run_tprun("eval triviaqa --data x.jsonl --help");
    CHECK(r.code == 0);
    CHECK_MESSAGE(r.out.find("\nUsage: tprun MODEL_DIR eval triviaqa [OPTIONS]") != std::string::npos, r.out);
    CHECK(r.out.find("--shots") != std::string::npos);
  }
}

TEST_CASE("tprun --help of generate, chat and eval states the defaults of --max-new-tokens and --seed") {
  const UxRun gen = run_tprun("generate --help");
  CHECK(gen.out.find("tokens to generate at most (default 128, or generation_config.json's max_new_tokens)") !=
        std::string::npos);
  CHECK(gen.out.find("sampling seed (default 0, so runs repeat exactly;") != std::string::npos);
  CHECK(gen.out.find("--progress-interval") != std::string::npos);
  CHECK(run_tprun("chat --help").out.find("sampling seed (default 0, so runs repeat exactly;") != std::string::npos);
  if (has_eval())
    CHECK(run_tprun("eval triviaqa --help").out.find("sampling seed (default 0, so runs repeat exactly)") != std::string::npos);
}

TEST_CASE("tprun generate --input --progress-interval: the period of the progress lines in a log") {
  const std::string model = ux_model_dir();
  const std::string dir = std::string(TPSHARD_TEST_OUT_DIR) + "/cli-ux-progress";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/in.jsonl") << "{\"prompt\": \"a\"}\n{\"prompt\": \"b\"}\n{\"prompt\": \"c\"}\n";
  const std::string job = model + " --device cpu generate --input " + dir + "/in.jsonl --batch-size 1 --max-new-tokens 2";
  // default 10 s: the final line only; a tiny period: a line per prompt
  const UxRun slow = run_tprun(job + " --output " + dir + "/slow.jsonl");
  REQUIRE(slow.code == 0);
  CHECK(slow.err.find("generate: 1/3") == std::string::npos);
  CHECK(slow.err.find("generate: 3/3") != std::string::npos);
  const UxRun fast = run_tprun(job + " --output " + dir + "/fast.jsonl --progress-interval 0.000001");
  REQUIRE(fast.code == 0);
  CHECK_MESSAGE(fast.err.find("generate: 1/3") != std::string::npos, fast.err);
  CHECK(fast.err.find("generate: 2/3") != std::string::npos);
  const UxRun zero = run_tprun(job + " --output " + dir + "/zero.jsonl --progress-interval 0");
  CHECK(zero.code == 2);
  CHECK(zero.err.rfind("error: --progress-interval: must be > 0", 0) == 0);
  CHECK_FALSE(std::filesystem::exists(dir + "/zero.jsonl"));
}

TEST_CASE("tprun generate --json: the closing stats as one JSON object on stderr; refused for a JSONL job") {
  const std::string model = ux_model_dir();
  const UxRun r = run_tprun(model + " --device cpu generate --prompt Once --max-new-tokens 5 --json");
  REQUIRE(r.code == 0);
  const std::string last = r.err.substr(r.err.rfind('\n', r.err.size() - 2) + 1);
  const nlohmann::json j = nlohmann::json::parse(last);
  CHECK(j["decode_tokens"] == 4);  // the first new token comes from prefill
  CHECK(j["prefill_tokens"].get<int64_t>() >= 2);
  CHECK(j["tp_size"] == 1);
  CHECK(j["device"] == "cpu");
  CHECK(j["weight_bytes_per_rank"].get<uint64_t>() > 0);
  CHECK(j["peak_rss_bytes"].get<uint64_t>() > 0);
  CHECK(r.err.find("tprun: prefill") == std::string::npos);  // no text line besides it
  const UxRun jsonl = run_tprun(model + " --device cpu generate --input /dev/null --output x.jsonl --json");
  CHECK(jsonl.code == 2);
  CHECK(jsonl.err.find("error: generate: --json is for --prompt runs") == 0);
}

TEST_CASE("tprun -q / -v / TPSHARD_LOG_LEVEL: status lines off, on, or with details; results unchanged") {
  const std::string model = ux_model_dir();
  const std::string args = " --device cpu generate --prompt Once --max-new-tokens 6";
  const UxRun info = run_tprun(model + args);
  REQUIRE(info.code == 0);
  CHECK(info.err.find("tprun: backend cpu") != std::string::npos);
  CHECK(info.err.find("tprun: prefill") != std::string::npos);
  CHECK(info.err.find("tprun: session:") == std::string::npos);
  const UxRun quiet = run_tprun(model + " -q" + args);
  REQUIRE(quiet.code == 0);
  CHECK(quiet.err.empty());
  CHECK(quiet.out == info.out);
  const UxRun env_quiet = run_tprun(model + args, "TPSHARD_LOG_LEVEL=quiet ");
  CHECK(env_quiet.err.empty());
  CHECK(env_quiet.out == info.out);
  const UxRun verbose = run_tprun(model + " -v" + args, "TPSHARD_LOG_LEVEL=quiet ");  // the flag wins
  REQUIRE(verbose.code == 0);
  CHECK(verbose.err.find("tprun: session: model " + model + ", device cpu, tp_size 1") != std::string::npos);
  CHECK(verbose.err.find("tprun: tp_rank 0 loaded ") != std::string::npos);
  CHECK(verbose.err.find("(hashes verified)") != std::string::npos);
  CHECK(verbose.out == info.out);
  const UxRun bad = run_tprun(model + args, "TPSHARD_LOG_LEVEL=loud ");
  CHECK(bad.code == 1);
  CHECK(bad.err.find("error: environment variable TPSHARD_LOG_LEVEL='loud' is not legal (legal: quiet, info or verbose)") == 0);
  CHECK(run_tprun(model + " -q -v" + args).code == 2);
}
