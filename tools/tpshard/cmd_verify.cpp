// cmd_verify.cpp: `tpshard verify`: for every shard of the manifest (or of one tp size): size, header
// and table hash against the manifest, every tensor's XXH3, the tensor table against what manifest.json's
// "model" section calls for (names and local shapes), then the whole-file XXH3; then the tokenizer
// must load (Tokenizer::load). Every shard file is checked; each bad one is named on stderr, and the run
// ends with an Error naming the first bad tensor and file (exit 1).
#include <sys/stat.h>

#include <cstdio>


#include "model/rank_shard.h"
#include "format/error.h"
#include "format/hash.h"
#include "model/manifest.h"
#include "format/shard_file.h"
#include "tools/tpshard/check_tokenizer.h"
#include "tools/tpshard/commands.h"

namespace tpshard::cli {
namespace {

const char* kHint = "the file is corrupt: re-run tpshard convert (or copy the directory again)";
const char* kMissingHint =
    "the directory is incomplete: copy it again from where it was converted, or re-run tpshard convert";
/// Check one shard file against its manifest entry; returns its tensor count, or throws Error naming
/// the file (and the tensor) at the first mismatch.
size_t verify_shard(const std::string& dir, const std::string& path, const Manifest& m, int tp_size,
                    const ManifestShard& s, int pp_size) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error(path + ": missing (listed in manifest.json)", kMissingHint);
  if (!S_ISREG(st.st_mode)) {
    const ShardReader named(path);  // throws, naming what it is instead (a directory, a FIFO)
  }
  if (static_cast<uint64_t>(st.st_size) != s.bytes)
    throw Error(path + ": " + std::to_string(st.st_size) + " bytes, manifest.json says " + std::to_string(s.bytes), kHint);
  const ShardReader r(path);
  if (r.header().tp_size != static_cast<uint32_t>(tp_size) || r.header().tp_rank != static_cast<uint32_t>(s.tp_rank))
    throw Error(path + ": header says tp_rank " + std::to_string(r.header().tp_rank) + " of " +
                    std::to_string(r.header().tp_size) + ", manifest.json says " + std::to_string(s.tp_rank) + " of " +
                    std::to_string(tp_size),
                kHint);
  check_shard_belongs(r, s, dir);
  if (r.header().arena_bytes != s.weight_bytes)
    throw Error(path + ": arena_bytes " + std::to_string(r.header().arena_bytes) + " != manifest weight_bytes " +
                    std::to_string(s.weight_bytes),
                kHint);
  for (const auto& t : r.tensors()) {
    const uint64_t h = r.hash_stored(t);
    if (h != t.xxh3)
      throw Error(path + ": tensor " + t.name + ": XXH3 " + hash_to_hex(h) + " != stored " + hash_to_hex(t.xxh3), kHint);
  }
  check_tensors_match_model(r, m, tp_size, s.tp_rank, pp_size, s.pp_stage);
  const uint64_t fh = xxh3_file(path);
  if (fh != s.xxh3) throw Error(path + ": file XXH3 " + hash_to_hex(fh) + " != manifest " + hash_to_hex(s.xxh3), kHint);
  std::printf("ok  %-22s %s  %zu tensors\n", s.file.c_str(), hash_to_hex(fh).c_str(), r.tensors().size());
  return r.tensors().size();
}

}  // namespace

int run_verify(const std::string& dir, int tp_size) {
  const Manifest m = load_manifest(dir);
  if (tp_size) shards_for(m, tp_size, dir);
  size_t files = 0, tensors = 0, bad = 0;
  std::string first_bad, first_hint;
  auto verify_layout = [&](int pp_size, int size, const std::vector<ManifestShard>& shards) {
    if (tp_size && size != tp_size) return;
    try {
      check_manifest_ranges(m, size, dir, pp_size);
    } catch (const Error& e) {
      std::fprintf(stderr, "BAD %s\n", e.what());
      if (bad++ == 0) {
        first_bad = e.what();
        first_hint = e.hint();
      }
    }
    for (const auto& s : shards) {
      try {
        tensors += verify_shard(dir, dir + "/" + s.file, m, size, s, pp_size);
        ++files;
      } catch (const Error& e) {
        std::fprintf(stderr, "BAD %s\n", e.what());
        if (bad++ == 0) {
          first_bad = e.what();
          first_hint = e.hint();
        }
      }
    }
  };
  for (const auto& [size, shards] : m.shards) verify_layout(1, size, shards);
  for (const auto& [key, shards] : m.pp_shards) verify_layout(key.first, key.second, shards);
  if (bad)
    throw Error(std::to_string(bad) + " of " + std::to_string(files + bad) + " shard file(s) are bad; first: " + first_bad,
                first_hint);
  for (const auto& t : m.tokenizer_files) {
    struct stat st {};
    if (::stat((dir + "/" + t).c_str(), &st) != 0) throw Error(dir + "/" + t + ": missing (listed in manifest.json)", kMissingHint);
  }
  check_tokenizer_loads(dir, "the tokenizer is corrupt: copy it again from the checkpoint, or re-run tpshard convert");
  std::printf("verified %zu shard file(s), %zu tensors: all hashes match\n", files, tensors);
  return 0;
}

}  // namespace tpshard::cli
