// add_layouts.cpp: checks and commit of `tpshard convert --add-tp` (see add_layouts.h).
#include "convert/add_layouts.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "convert/fs_util.h"
#include "format/error.h"
#include "format/hash.h"

namespace tpshard {

namespace fs = std::filesystem;

Manifest load_conversion_to_extend(const std::string& out_dir, const ModelConfig& cfg, std::optional<DType> dtype) {
  std::error_code ec;
  if (!fs::is_regular_file(fs::path(out_dir) / "manifest.json", ec))
    throw Error(out_dir + ": no manifest.json, so there is no conversion to add layouts to",
                "convert without --add-tp (use --tp) to make a new output directory");
  Manifest m = load_manifest(out_dir);
  const uint64_t have = model_section_xxh3(model_config_to_json(m.model));
  const uint64_t want = model_section_xxh3(model_config_to_json(cfg));
  if (have != want)
    throw Error(out_dir + "/manifest.json: its model (" + m.model.architecture + ", " +
                    std::to_string(m.model.num_hidden_layers) + " layers) was converted from another config.json than "
                    "the one given (" + cfg.architecture + ", " + std::to_string(cfg.num_hidden_layers) + " layers)",
                "add layouts only from the checkpoint OUT was converted from, or convert into a new -o");
  if (dtype && m.dtype != *dtype)
    throw Error(out_dir + ": was converted to " + dtype_name(m.dtype) + ", the added layouts would be " + dtype_name(*dtype),
                "leave out --dtype (an added layout takes the conversion's dtype), or convert into a new -o");
  return m;
}

void check_same_source(const std::vector<SourceFile>& recorded, const std::vector<SourceFile>& source,
                       const std::string& out_dir, const std::string& hf_dir) {
  const std::string hint = "add layouts only from the checkpoint " + out_dir +
                           " was converted from (tpshard inspect lists its source files), or convert into a new -o";
  if (recorded.size() != source.size())
    throw Error(hf_dir + ": has " + std::to_string(source.size()) + " weight file(s), " + out_dir + " was converted from " +
                    std::to_string(recorded.size()),
                hint);
  for (size_t i = 0; i < source.size(); ++i) {
    const SourceFile& a = recorded[i];
    const SourceFile& b = source[i];
    if (a.name != b.name || a.bytes != b.bytes)
      throw Error(hf_dir + "/" + b.name + ": " + std::to_string(b.bytes) + " bytes, but " + out_dir + " was converted from " +
                      a.name + " of " + std::to_string(a.bytes) + " bytes",
                  hint);
    if (a.xxh3 != 0 && b.xxh3 != 0 && a.xxh3 != b.xxh3)
      throw Error(hf_dir + "/" + b.name + ": XXH3 " + hash_to_hex(b.xxh3) + ", but " + out_dir + " was converted from a file " +
                      "of that name with XXH3 " + hash_to_hex(a.xxh3) + " (the weights changed)",
                  hint);
  }
}

bool manifest_has_layout(const Manifest& m, int pp_size, int tp_size) {
  if (pp_size == 1) return m.shards.count(tp_size) != 0;
  return m.pp_shards.count({pp_size, tp_size}) != 0;
}

void commit_added_layouts(const std::string& tmp_dir, const std::string& out_dir, const Manifest& merged,
                          const std::vector<std::string>& layout_dirs) {
  for (const std::string& d : layout_dirs) {
    const fs::path dst = fs::path(out_dir) / d;
    std::error_code ec;
    if (fs::exists(fs::symlink_status(dst, ec))) {
      // Not referenced by the old manifest (the caller only adds layouts it lacks): a leftover.
      fs::remove_all(dst, ec);
      if (ec) throw Error(dst.string() + ": cannot remove the unreferenced leftover (" + ec.message() + ")",
                          "remove it yourself, then run the same command again");
    }
    fsync_path((fs::path(tmp_dir) / d).string());
    if (std::rename((fs::path(tmp_dir) / d).c_str(), dst.c_str()) != 0)
      throw Error(dst.string() + ": cannot move the new layout into place (" + std::strerror(errno) + ")",
                  "check that " + out_dir + " is writable and on the same filesystem as its temporary directory");
  }
  fsync_path(out_dir);
  save_manifest(merged, tmp_dir);
  const fs::path src = fs::path(tmp_dir) / "manifest.json";
  const fs::path dst = fs::path(out_dir) / "manifest.json";
  if (std::rename(src.c_str(), dst.c_str()) != 0)
    throw Error(dst.string() + ": cannot replace the manifest (" + std::strerror(errno) + ")",
                "check that " + out_dir + " is writable; the added layout directories are in place but not yet listed");
  fsync_path(out_dir);
}

}  // namespace tpshard
