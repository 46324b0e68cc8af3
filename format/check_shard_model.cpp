// check_shard_model.cpp: see check_shard_model.h.
#include "format/check_shard_model.h"

#include <set>
#include <string>
#include <vector>

#include "format/convert/tensor_plan.h"
#include "format/error.h"
#include "format/model_config.h"

namespace tpshard {
namespace {

const char* kModelHint =
    "manifest.json's \"model\" section does not describe these shards (edited after conversion?): restore "
    "manifest.json from the conversion, or re-run tpshard convert";

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

/// The shard's tensors must be exactly those tpshard convert writes for manifest.json's "model" section
/// at (tp_size, tp_rank): the same names and local shapes (tensor_plan.h), each in manifest.json's
/// "dtype". A section edited after conversion with its model_section_xxh3 line removed (load_manifest
/// then cannot notice) would otherwise pass verify, and tprun would refuse it (a missing tensor) or run
/// a smaller model silently; an edited "dtype" would make tpshard plan misjudge the kv_cache.
void check_tensors_match_model(const ShardReader& r, const Manifest& m, int tp_size, int tp_rank) {
  const std::string& path = r.path();
  const std::string section = "manifest.json's model section (num_hidden_layers " +
                              std::to_string(m.model.num_hidden_layers) + ", hidden_size " +
                              std::to_string(m.model.hidden_size) + ")";
  const TpLayout layout = make_tp_layout(m.model, tp_size);
  std::set<std::string> planned;
  for (const OutputTensor& t : plan_tensors(m.model)) {
    planned.insert(t.name);
    const TensorRecord* rec = r.find(t.name);
    if (!rec) throw Error(path + ": has no tensor " + t.name + ", which " + section + " calls for", kModelHint);
    const RankSlice want = slice_for_rank(t, m.model, layout, tp_rank);
    if (rec->local_shape != want.local_shape)
      throw Error(path + ": tensor " + t.name + " is " + shape_text(rec->local_shape) + ", " + section + " gives " +
                      shape_text(want.local_shape) + " at tp_rank " + std::to_string(tp_rank) + " of " +
                      std::to_string(tp_size),
                  kModelHint);
  }
  for (const TensorRecord& rec : r.tensors())
    if (!planned.count(rec.name))
      throw Error(path + ": holds tensor " + rec.name + ", which " + section + " does not call for", kModelHint);
  check_shard_dtype(r, m.dtype);
}

}  // namespace tpshard
