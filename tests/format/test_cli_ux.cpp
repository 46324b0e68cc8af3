// test_cli_ux.cpp: tpshard CLI fixes from a new-user test, on the binary: a mistyped option names the
// closest one; `--tp 2,,4` is refused; `inspect` fails on a truncated or misplaced shard naming the file;
// TPSHARD_LOG_LEVEL=quiet quiets convert as -q does.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "model/manifest.h"
#include "tiny_checkpoint.h"

using namespace tpshard;
using namespace tpshard::test;
namespace fs = std::filesystem;

TEST_CASE("tpshard: a mistyped option names the closest option of that subcommand") {
  ScratchDir d;
  fs::create_directories(d / "hf");  // hf_dir's existence is checked before leftover words
  const std::string log = d / "log.txt";
  CHECK(run_tpshard("convert " + (d / "hf") + " -o " + (d / "out") + " --forse", log) == 2);
  CHECK(read_text(log) ==
        "error: tpshard convert: unknown option --forse\n"
        "hint: did you mean --force? (`tpshard convert --help` lists the options)\n");
  // Nothing close: only where the options are listed.
  CHECK(run_tpshard("inspect " + (d / "m") + " --zzzzzzzz", log) == 2);
  CHECK(read_text(log) ==
        "error: tpshard inspect: unknown option --zzzzzzzz\nhint: `tpshard inspect --help` lists the options\n");
}

TEST_CASE("tpshard convert --tp: an empty list item is refused, writing nothing") {
  ScratchDir d;
  LlamaSpec s;
  make_llama(s).save(d / "hf");
  const std::string log = d / "log.txt";
  const std::string convert = "convert " + (d / "hf") + " -o " + (d / "out") + " -q";
  for (const std::string list : {"2,,4", "2,", ",2"}) {
    CAPTURE(list);
    CHECK(run_tpshard(convert + " --tp " + list, log) == 2);
    CHECK(read_text(log).rfind("error: --tp: has an empty item in '" + list + "' (write e.g. 1,2,4)\n", 0) == 0);
  }
  CHECK(run_tpshard(convert + " --tp 1.5", log) == 2);
  CHECK(read_text(log) == "error: --tp: must be an integer, got 1.5\nhint: `tpshard convert --help` lists the options\n");
  CHECK_FALSE(fs::exists(d / "out"));
  // Lists still work, also split over repeated --tp.
  REQUIRE(run_tpshard(convert + " --tp 1,2 --tp 4", log) == 0);
  const Manifest m = load_manifest(d / "out");
  std::vector<int> sizes;
  for (const auto& [size, shards] : m.shards) sizes.push_back(size);
  CHECK(sizes == std::vector<int>{1, 2, 4});
}

TEST_CASE("tpshard inspect: a truncated or misplaced shard file is marked in the report and named after it, exit 1") {
  ScratchDir d;
  LlamaSpec s;
  make_llama(s).save(d / "hf");
  const std::string out = d / "out";
  const std::string log = d / "log.txt";
  REQUIRE(run_tpshard("convert " + (d / "hf") + " -o " + out + " --tp 1,2 -q", log) == 0);
  REQUIRE(run_tpshard("inspect " + out, log) == 0);
  const std::string rank1 = out + "/tp2/rank1.tps";
  const uint64_t size = fs::file_size(rank1);

  // Truncated: the report is printed (the other shards, the model), the file marked DAMAGED, and
  // ShardReader's header check naming it comes after the report.
  fs::resize_file(rank1, size - 1);
  CHECK(run_tpshard("inspect " + out, log) == 1);
  std::string text = read_text(log);
  CHECK(text.rfind("model      LlamaForCausalLM", 0) == 0);
  CHECK(text.find("tp2/rank0.tps\n") != std::string::npos);
  CHECK(text.find("tp2/rank1.tps  DAMAGED (below)\n") != std::string::npos);
  const size_t err = text.find("error: " + rank1 + ": file is " + std::to_string(size - 1) + " bytes but the header says ");
  CHECK(err != std::string::npos);
  CHECK(err > text.find("DAMAGED"));
  CHECK(text.find("\nhint: ", err) != std::string::npos);
  CHECK(text.find("tpshard verify", err) != std::string::npos);
  CHECK(run_tpshard("inspect " + out + " --tp 1", log) == 0);  // --tp 1 does not list tp2's files

  // Another rank's file in its place (a consistent shard by itself): the header's rank or the manifest's
  // size tells.
  fs::remove(rank1);
  fs::copy_file(out + "/tp2/rank0.tps", rank1);
  CHECK(run_tpshard("inspect " + out + " --tp 2", log) == 1);
  text = read_text(log);
  const uint64_t rank0_size = fs::file_size(rank1);
  CHECK(text.find("tp2/rank1.tps  DAMAGED (below)\n") != std::string::npos);
  const std::string tail = text.substr(text.find("error: "));
  if (rank0_size == size) {
    CHECK(tail == "error: " + rank1 + ": header says tp_rank 0 of tp_size 2, manifest.json lists it as tp_rank 1 of "
                  "tp_size 2\nhint: run `tpshard verify " + out + "` for the full check, and re-run tpshard convert\n");
  } else {
    CHECK(tail == "error: " + rank1 + ": file is " + std::to_string(rank0_size) + " bytes, manifest.json says " +
                      std::to_string(size) + (rank0_size < size ? " (truncated)" : "") + "\nhint: run `tpshard verify " +
                      out + "` for the full check, and re-run tpshard convert\n");
  }
}

TEST_CASE("tpshard convert: TPSHARD_LOG_LEVEL=quiet drops progress and table as -q; a bad value is refused, nothing written") {
  ScratchDir d;
  LlamaSpec s;
  make_llama(s).save(d / "hf");
  const std::string log = d / "log.txt";
  REQUIRE(run_tpshard("convert " + (d / "hf") + " -o " + (d / "info") + " --tp 1,2", log) == 0);
  CHECK(read_text(log).find("tp2/rank1.tps") != std::string::npos);  // the table
  REQUIRE(run_tpshard("convert " + (d / "hf") + " -o " + (d / "quiet") + " --tp 1,2", log, "TPSHARD_LOG_LEVEL=quiet ") == 0);
  const std::string quiet = read_text(log);
  CHECK_MESSAGE(quiet.find("tp2/rank1.tps") == std::string::npos, quiet);
  CHECK(quiet.find("converting:") == std::string::npos);
  CHECK(quiet.find("tpshard convert: " + (d / "hf") + " -> " + (d / "quiet")) != std::string::npos);  // the result line
  CHECK(load_manifest(d / "quiet").shards.count(2) == 1);
  CHECK(run_tpshard("convert " + (d / "hf") + " -o " + (d / "bad"), log, "TPSHARD_LOG_LEVEL=loud ") == 1);
  CHECK(read_text(log) == "error: environment variable TPSHARD_LOG_LEVEL='loud' is not legal (legal: quiet, info or "
                          "verbose)\nhint: fix or unset TPSHARD_LOG_LEVEL (docs/TUNING.md lists every variable)\n");
  CHECK_FALSE(fs::exists(d / "bad"));
}
