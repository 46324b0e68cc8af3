// cmd_inspect.cpp: `tpshard inspect`: model config, dtype, shards per tp size and (--tensors) one
// rank's tensor table, read through the validating ShardReader. Checks the tp size and --rank before
// printing anything, and every shard file (header, tensor table, size against manifest.json): a damaged
// file is marked in the report and its error printed after it (exit 1).
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "common/progress.h"
#include "format/error.h"
#include "format/hash.h"
#include "model/manifest.h"
#include "format/shard_file.h"
#include "tools/tpshard/commands.h"

namespace tpshard::cli {

namespace {

std::string shape(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

const char* codec_name(Codec c) {
  switch (c) {
    case Codec::None: return "none";
    case Codec::Zstd: return "zstd";
    case Codec::ZstdBytePlanes: return "zstd-planes";
  }
  return "?";
}

}  // namespace

int run_inspect(const std::string& dir, int tp_size, bool list_tensors, int rank) {
  const Manifest m = load_manifest(dir);
  struct Layout {
    int pp, tp;
    const std::vector<ManifestShard>* shards;
  };
  std::vector<Layout> layouts;
  for (const auto& [size, shards] : m.shards) layouts.push_back({1, size, &shards});
  for (const auto& [key, shards] : m.pp_shards) layouts.push_back({key.first, key.second, &shards});
  if (tp_size) shards_for(m, tp_size, dir);  // Error listing the available tp sizes
  // Every listed shard file: its header and tensor table parse (ShardReader), it is the rank the manifest
  // says, and its size is the manifest's. A file that fails is marked DAMAGED in the report and its error
  // printed after it (exit 1): the rest of the report still tells the user what the directory holds.
  std::map<std::string, Error> damaged;  // shard file (as in the manifest) -> what is wrong with it
  for (const Layout& l : layouts) {
    const int size = l.tp;
    if (tp_size && size != tp_size) continue;
    for (const auto& s : *l.shards) try {
      const std::string path = dir + "/" + s.file;
      const ShardReader r(path);
      const std::string fix = "run `tpshard verify " + dir + "` for the full check, and re-run tpshard convert";
      TPS_CHECK(r.file_bytes() == s.bytes,
                path + ": file is " + std::to_string(r.file_bytes()) + " bytes, manifest.json says " +
                    std::to_string(s.bytes) + (r.file_bytes() < s.bytes ? " (truncated)" : ""),
                fix);
      TPS_CHECK(static_cast<int>(r.header().tp_rank) == s.tp_rank && static_cast<int>(r.header().tp_size) == size,
                path + ": header says tp_rank " + std::to_string(r.header().tp_rank) + " of tp_size " +
                    std::to_string(r.header().tp_size) + ", manifest.json lists it as tp_rank " +
                    std::to_string(s.tp_rank) + " of tp_size " + std::to_string(size),
                fix);
      check_shard_dtype(r, m.dtype);  // a "dtype" edited in manifest.json (the tensor table only)
    } catch (const Error& e) {
      damaged.emplace(s.file, e);
    }
  }
  // --tensors: (file, reader) of rank `rank` of each listed tp size
  std::vector<std::pair<std::string, std::unique_ptr<ShardReader>>> readers;
  if (list_tensors) {
    for (const auto& [size, shards] : m.shards) {
      if (tp_size && size != tp_size) continue;
      TPS_CHECK(rank >= 0 && rank < size,
                "inspect --rank " + std::to_string(rank) + ": tp_size " + std::to_string(size) + " has tp_rank 0.." +
                    std::to_string(size - 1),
                tp_size ? "pass --rank 0.." + std::to_string(size - 1)
                        : "without --tp every tp size is listed; pass --tp N to list one, with --rank below N");
      if (!damaged.count(shards[rank].file))
        readers.emplace_back(shards[rank].file, std::make_unique<ShardReader>(dir + "/" + shards[rank].file));
    }
  }
  const ModelConfig& c = m.model;
  std::printf("model      %s (%s): %lld layers, hidden %lld, heads %lld, kv heads %lld, head_dim %lld, ffn %lld, vocab %lld\n",
              c.architecture.c_str(), c.model_type.c_str(), (long long)c.num_hidden_layers, (long long)c.hidden_size,
              (long long)c.num_attention_heads, (long long)c.num_key_value_heads, (long long)c.head_dim,
              (long long)c.intermediate_size, (long long)c.vocab_size);
  std::printf("dtype      %s   format v%d   tool %s   tied embeddings %s\n", dtype_name(m.dtype), m.format_version,
              m.tool_version.c_str(), c.tie_word_embeddings ? "yes" : "no");
  for (size_t i = 0; i < m.source.size(); ++i)  // one source file per line
    std::printf("%-10s %s (%s, %s)\n", i == 0 ? "source" : "", m.source[i].name.c_str(), human_bytes(m.source[i].bytes).c_str(),
                hash_to_hex(m.source[i].xxh3).c_str());
  std::printf("tokenizer ");
  for (const auto& t : m.tokenizer_files) std::printf(" %s", t.c_str());
  std::printf("\n\n%-3s %-4s %-5s %-7s %-7s %12s %12s  %-9s %-9s %-13s %-13s  %-16s  %s\n", "pp", "tp", "stage", "rank",
              "layers", "file", "weights", "heads", "kv_heads", "mlp_columns", "vocab_rows", "xxh3", "path");
  auto range = [](const std::optional<TpRankRanges>& r, Range TpRankRanges::*member) {
    if (!r) return std::string("-");
    const Range x = (*r).*member;
    return std::to_string(x.begin) + "-" + std::to_string(x.end - 1);
  };
  for (const Layout& l : layouts) {
    if (tp_size && l.tp != tp_size) continue;
    std::vector<uint64_t> stage_bytes(static_cast<size_t>(l.pp), 0), rank_bytes;
    for (const auto& s : *l.shards) {
      const std::string layers = s.layers ? std::to_string(s.layers->begin) + "-" + std::to_string(s.layers->end - 1) : "all";
      std::printf("%-3d %-4d %-5d %-7d %-7s %12s %12s  %-9s %-9s %-13s %-13s  %-16s  %s\n", l.pp, l.tp, s.pp_stage, s.tp_rank,
                  layers.c_str(), human_bytes(s.bytes).c_str(), human_bytes(s.weight_bytes).c_str(),
                  range(s.ranges, &TpRankRanges::heads).c_str(), range(s.ranges, &TpRankRanges::kv_heads).c_str(),
                  range(s.ranges, &TpRankRanges::mlp_columns).c_str(), range(s.ranges, &TpRankRanges::vocab_rows).c_str(),
                  hash_to_hex(s.xxh3).c_str(), (s.file + (damaged.count(s.file) ? "  DAMAGED (below)" : "")).c_str());
      stage_bytes[static_cast<size_t>(s.pp_stage)] += s.weight_bytes;
      rank_bytes.push_back(s.weight_bytes);
    }
    auto spread = [](const std::vector<uint64_t>& v, int* heaviest) {
      uint64_t sum = 0, hi = 0;
      for (size_t i = 0; i < v.size(); ++i) {
        sum += v[i];
        if (v[i] > hi) hi = v[i], *heaviest = static_cast<int>(i);
      }
      return 100.0 * (static_cast<double>(hi) * static_cast<double>(v.size()) - static_cast<double>(sum)) / static_cast<double>(sum);
    };
    int heaviest = 0;
    if (l.tp > 1 && l.pp == 1) {
      const double sp = spread(rank_bytes, &heaviest);
      std::printf("    tp %d weight spread: heaviest tp_rank %d %+.2f%% over total/tp\n", l.tp, heaviest, sp);
    }
    if (l.pp > 1) {
      const double sp = spread(stage_bytes, &heaviest);
      std::printf("    pp %d x tp %d stage bytes:", l.pp, l.tp);
      for (uint64_t b : stage_bytes) std::printf(" %s", human_bytes(b).c_str());
      std::printf("; heaviest stage %d %+.2f%% over total/pp\n", heaviest, sp);
    }
  }
  for (const auto& [file, reader] : readers) {
    const ShardReader& r = *reader;
    std::printf("\n%s: %zu tensors, data %s at offset %llu, arena %s\n", file.c_str(), r.tensors().size(),
                human_bytes(r.header().data_bytes).c_str(), (unsigned long long)r.header().data_offset,
                human_bytes(r.header().arena_bytes).c_str());
    std::printf("%-28s %-5s %-16s %-16s %-10s %4s %-11s %12s %12s %12s  %s\n", "name", "dtype", "global", "local", "split",
                "axis", "codec", "arena_off", "raw", "stored", "xxh3");
    for (const auto& t : r.tensors())
      std::printf("%-28s %-5s %-16s %-16s %-10s %4d %-11s %12llu %12llu %12llu  %s\n", t.name.c_str(), dtype_name(t.dtype),
                  shape(t.global_shape).c_str(), shape(t.local_shape).c_str(), split_kind_name(t.split), t.split_axis,
                  codec_name(t.codec), (unsigned long long)t.arena_offset, (unsigned long long)t.raw_bytes,
                  (unsigned long long)t.stored_bytes, hash_to_hex(t.xxh3).c_str());
  }
  if (damaged.empty()) return 0;
  std::fflush(stdout);
  for (const auto& [file, e] : damaged) std::fprintf(stderr, "error: %s\n", e.what());
  std::fprintf(stderr, "hint: %s\n", damaged.begin()->second.hint().c_str());
  return 1;
}

}  // namespace tpshard::cli
