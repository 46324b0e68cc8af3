// cmd_convert.cpp: `tpshard convert`: runs convert_checkpoint, prints the closing summary table
// (per tp_size and rank: tensors, bytes, ratio, hash) and a final one-line report on stderr.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "convert/hub_cache.h"
#include "common/progress.h"
#include "format/error.h"
#include "format/hash.h"
#include "tools/tpshard/check_tokenizer.h"
#include "tools/tpshard/commands.h"

namespace tpshard::cli {

void parse_compress(const std::string& s, Codec* codec, int* level) {
  std::string name = s, lvl;
  const auto colon = s.find(':');
  if (colon != std::string::npos) {
    name = s.substr(0, colon);
    lvl = s.substr(colon + 1);
  }
  *level = 3;
  if (name == "none" && lvl.empty()) {
    *codec = Codec::None;
    return;
  }
  if (name == "zstd") *codec = Codec::Zstd;
  else if (name == "zstd-planes") *codec = Codec::ZstdBytePlanes;
  else throw Error("--compress " + s + ": unknown codec", "use none, zstd[:level] or zstd-planes[:level] (level 1..19)");
  if (!lvl.empty()) {
    try {
      size_t used = 0;
      *level = std::stoi(lvl, &used);
      if (used != lvl.size()) throw 0;
    } catch (...) {
      throw Error("--compress " + s + ": level must be an integer", "e.g. --compress zstd:3");
    }
    if (*level < 1 || *level > 19) throw Error("--compress " + s + ": level must be 1..19", "e.g. --compress zstd:3");
  }
}

namespace {

/// Throw Error naming hf_dir unless it is a directory: missing or unreadable files are errors (exit 1), as
/// `tpshard inspect` / `verify` and tprun report a missing model directory, not usage errors.
void check_hf_dir(const std::string& hf_dir) {
  const char* const hint = "give the Hugging Face model directory (it holds config.json and *.safetensors)";
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(hf_dir, ec);
  if (ec || !std::filesystem::exists(st))
    throw Error(hf_dir + ": cannot open (" + std::strerror(ec ? ec.value() : ENOENT) + ")", hint);
  if (!std::filesystem::is_directory(st)) throw Error(hf_dir + ": not a directory", hint);
}

/// A snapshot of the hub cache holding only some files (`hf download ORG/NAME config.json`, or a download
/// cut short): Error naming the repo id and the command that downloads the rest. The weight files
/// are Checkpoint's four forms (format/checkpoint.h).
void check_cached_weights(const std::string& repo_id, const std::string& snapshot) {
  std::error_code ec;
  for (const char* f : {"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json"})
    if (std::filesystem::exists(std::filesystem::path(snapshot) / f, ec)) return;
  throw Error(repo_id + ": the Hugging Face cache holds " + snapshot +
                  " without the weights (no model.safetensors, model.safetensors.index.json, pytorch_model.bin or "
                  "pytorch_model.bin.index.json)",
              "download the whole repository: " + hub_download_command(repo_id) + " (huggingface_hub)");
}

}  // namespace

int run_convert(const ConvertOptions& options) {
  ConvertOptions opt = options;
  opt.hf_dir = resolve_model_source(options.hf_dir);  // a repo id: its snapshot in the hub cache
  const bool from_cache = opt.hf_dir != options.hf_dir;
  if (from_cache)
    std::fprintf(stderr, "tpshard convert: %s is %s (Hugging Face cache)\n", options.hf_dir.c_str(), opt.hf_dir.c_str());
  check_hf_dir(opt.hf_dir);
  if (from_cache) check_cached_weights(options.hf_dir, opt.hf_dir);
  TPS_CHECK(!opt.out_dir.empty(), "convert --out: empty path", "give the directory to write, e.g. -o models/NAME");
  // The tokenizer files are copied as they are: load them first, so a corrupt one fails before any work.
  check_tokenizer_loads(opt.hf_dir, "the checkpoint's tokenizer is corrupt or unsupported; restore it from the "
                                    "original model (or remove it to convert without a tokenizer)");
  const ConvertResult r = convert_checkpoint(opt);
  if (opt.add_layouts) {
    std::string have;
    for (const std::string& l : r.already_present) have += (have.empty() ? "" : ", ") + l;
    if (!have.empty())
      std::fprintf(stderr, "tpshard convert: %s already holds %s: not written again\n", opt.out_dir.c_str(), have.c_str());
    if (r.shards.empty()) {
      std::fprintf(stderr, "tpshard convert: nothing to add; %s holds %s\n", opt.out_dir.c_str(),
                   manifest_layouts_text(r.manifest).c_str());
      return 0;
    }
  }
  if (opt.progress) {
    std::printf("%-4s %-5s %8s %12s %12s %7s  %-16s  %s\n", "tp", "rank", "tensors", "file", "raw", "ratio", "xxh3", "path");
    for (const auto& s : r.shards) {
      std::printf("%-4d %-5d %8zu %12s %12s %7.3f  %-16s  %s\n", s.tp_size, s.tp_rank, s.tensors,
                  human_bytes(s.file_bytes).c_str(), human_bytes(s.raw_bytes).c_str(),
                  s.raw_bytes ? static_cast<double>(s.file_bytes) / static_cast<double>(s.raw_bytes) : 0.0,
                  hash_to_hex(s.xxh3).c_str(), s.file.c_str());
    }
    if (!r.ignored.empty()) {
      std::printf("skipped %zu source tensor(s):", r.ignored.size());
      for (size_t i = 0; i < r.ignored.size() && i < 6; ++i) std::printf(" %s", r.ignored[i].c_str());
      std::printf(r.ignored.size() > 6 ? " ...\n" : "\n");
    }
  }
  if (!r.skipped_line.empty()) std::fprintf(stderr, "tpshard convert: %s\n", r.skipped_line.c_str());
  // --add-tp: the layouts written now, and all that OUT holds (the byte counts below are the new shards')
  std::string tps = manifest_layouts_text(r.manifest);
  if (opt.add_layouts) {
    Manifest added;
    for (const auto& s : r.shards) {
      if (s.pp_size == 1) added.shards[s.tp_size];
      else added.pp_shards[{s.pp_size, s.tp_size}];
    }
    tps = "added " + manifest_layouts_text(added) + " (now " + tps + ")";
  }
  uint64_t on_disk = 0, raw = 0;  // with --compress the files are smaller than the tensors they hold
  for (const auto& s : r.shards) {
    on_disk += s.file_bytes;
    raw += s.raw_bytes;
  }
  const std::string shards = human_bytes(on_disk) + (opt.add_layouts ? " of new shards on disk" : " of shards on disk") +
                             (on_disk < raw ? " (" + human_bytes(raw) + " of tensors, compressed)" : std::string());
  std::fprintf(stderr, "tpshard convert: %s -> %s: %s %s, %s: %s source -> %s in %.1fs (convert %.1fs, %.2f GB/s)\n",
               opt.hf_dir.c_str(), opt.out_dir.c_str(), r.manifest.model.architecture.c_str(), dtype_name(r.manifest.dtype),
               tps.c_str(), human_bytes(r.source_bytes).c_str(), shards.c_str(), r.total_seconds, r.seconds,
               r.seconds > 0 ? static_cast<double>(r.output_bytes) / r.seconds / 1e9 : 0.0);
  return 0;
}

}  // namespace tpshard::cli
