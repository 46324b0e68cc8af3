// add_layouts.h: `tpshard convert --add-tp`: adding (pp_size, tp_size) layouts to an existing conversion
// without changing its identity. Owns: the checks that OUT was converted from this checkpoint at this
// dtype, and the commit of the new layout directories and the merged manifest into OUT.
// Does not own: writing the shards (convert.cpp does, into its temporary directory).
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/manifest.h"

namespace tpshard {

/// OUT/manifest.json of the conversion to extend. Throws Error naming OUT when it has no manifest
/// (hint: convert without --add-tp), when its config differs from `cfg` (the model sections' canonical
/// hashes, model_section_xxh3, differ), or when `dtype` is given and differs from its stored dtype
/// (hint: leave out --dtype, or a new -o). Without `dtype` the added layouts take the stored one.
Manifest load_conversion_to_extend(const std::string& out_dir, const ModelConfig& cfg, std::optional<DType> dtype);

/// Throws Error naming the first source file that differs between the checkpoint being read (`source`:
/// names, sizes and, when hashed, XXH3) and the one OUT was converted from (`recorded`): another file list,
/// another size, or another XXH3 where both were hashed. Layouts from another checkpoint would make one
/// directory hold two models.
void check_same_source(const std::vector<SourceFile>& recorded, const std::vector<SourceFile>& source,
                       const std::string& out_dir, const std::string& hf_dir);

/// True when m already holds the (pp_size, tp_size) layout.
bool manifest_has_layout(const Manifest& m, int pp_size, int tp_size);

/// Moves each layout directory named in `layout_dirs` (e.g. "tp3", "pp2-tp2": relative paths) from tmp_dir
/// into out_dir, replacing a directory of that name that the old manifest did not reference (left by an
/// --add-tp that was killed before its manifest was written), then replaces out_dir/manifest.json with
/// `merged` by an atomic rename. A reader sees either the old manifest or the new one, and each names
/// only complete shard files. Throws Error naming the path on a filesystem failure.
void commit_added_layouts(const std::string& tmp_dir, const std::string& out_dir, const Manifest& merged,
                          const std::vector<std::string>& layout_dirs);

}  // namespace tpshard
