// manifest.cpp: manifest.json <-> Manifest (docs/FORMAT.md, "Manifest"). Hashes are 16 hex digits.
#include "model/manifest.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <type_traits>
#include <iterator>
#include <sstream>

#include "format/error.h"
#include "format/json_depth.h"
#include "format/json_error.h"
#include "format/hash.h"
#include "format/shard_file.h"

namespace tpshard {

const char* tool_version() { return "0.1.0"; }

using nlohmann::json;

namespace {

const char* kRerun = "the manifest is corrupt or from another tool; re-run tpshard convert";

template <typename T>
T field(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) throw Error(where + ": field \"" + key + "\" is missing", kRerun);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // an integer field holds a JSON integer that fits T: get<T>() of a float (1e300) or of an integer out of
    // T's range would cast it (undefined behaviour for floats out of range)
    const json& v = j[key];
    const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                      : v.is_number_integer()
                          ? v.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                                (v.get<int64_t>() < 0 || static_cast<uint64_t>(v.get<int64_t>()) <=
                                                             static_cast<uint64_t>(std::numeric_limits<T>::max()))
                          : false;
    if (!fits)
      throw Error(where + ": field \"" + key + "\" is not an integer in the range of its type (" + (v.is_number() ? v.dump() : std::string(v.type_name())) + ")", kRerun);
  }
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    throw Error(where + ": field \"" + key + "\" has the wrong type", kRerun);
  }
}

/// {"heads": [begin, end], "kv_heads": [...], "mlp_columns": [...], "vocab_rows": [...]}.
json ranges_to_json(const TpRankRanges& r) {
  auto pair = [](const Range& x) { return json::array({x.begin, x.end}); };
  return {{"heads", pair(r.heads)}, {"kv_heads", pair(r.kv_heads)}, {"mlp_columns", pair(r.mlp_columns)},
          {"vocab_rows", pair(r.vocab_rows)}};
}

Range range_from_json(const json& a, const std::string& w) {
  if (!a.is_array() || a.size() != 2 || !a[0].is_number_integer() || !a[1].is_number_integer())
    throw Error(w + ": expected [begin, end] integers", kRerun);
  const int64_t b = a[0].get<int64_t>(), e = a[1].get<int64_t>();
  if (b < 0 || e < b) throw Error(w + ": [" + std::to_string(b) + ", " + std::to_string(e) + ") is not a range", kRerun);
  return Range{b, e};
}

TpRankRanges ranges_from_json(const json& j, const std::string& where) {
  auto get = [&](const char* key) {
    const std::string w = where + " ranges." + key;
    if (!j.is_object() || !j.contains(key)) throw Error(w + ": missing", kRerun);
    return range_from_json(j.at(key), w);
  };
  return {get("heads"), get("kv_heads"), get("mlp_columns"), get("vocab_rows")};
}


}  // namespace

namespace {

/// The canonical text of v for model_section_xxh3: compact, object keys sorted (nlohmann's object is a
/// sorted map), every number written from its double value with 17 significant digits, so that 10000,
/// 10000.0 and 1e4 (e.g. after `jq .` re-saved the file) are the same text.
void canonical(const nlohmann::json& v, std::string& out) {
  if (v.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [key, value] : v.items()) {
      if (!first) out += ',';
      first = false;
      out += nlohmann::json(key).dump();
      out += ':';
      canonical(value, out);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += ',';
      canonical(v[i], out);
    }
    out += ']';
  } else if (v.is_number()) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.17g", v.get<double>());
    out += buf;
  } else {
    out += v.dump();
  }
}

/// The nearest directory above `path` (at most 3 levels up) that holds manifest.json, "" when none: where
/// a user pointed at a shard file or a tpN/ folder of a converted model.
std::string enclosing_model_dir(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec);
  if (ec) return {};
  for (int up = 0; up < 3 && p.has_parent_path() && p.parent_path() != p; ++up) {
    p = p.parent_path();
    std::error_code missing;  // set when there is no such file: not an error here
    if (std::filesystem::is_regular_file(p / "manifest.json", missing)) return p.string();
  }
  return {};
}

}  // namespace

uint64_t model_section_xxh3(const nlohmann::json& model) {
  std::string text;
  canonical(model, text);
  return xxh3_64(text.data(), text.size());
}

Manifest load_manifest(const std::string& model_dir) {
  if (model_dir.empty())
    throw Error("the model directory path is empty", "give the directory written by `tpshard convert` (it holds manifest.json)");
  const std::string path = model_dir + "/manifest.json";
  std::ifstream f(path);
  if (!f) {
    const int err = errno;
    if (err == EACCES)
      throw Error(path + ": cannot open (" + std::strerror(err) + ")",
                  "make the model directory readable for this user (chmod -R a+rX DIR), or run as its owner");
    std::error_code ec;
    if (err == ENOTDIR && std::filesystem::is_regular_file(model_dir, ec)) {  // e.g. MODEL/manifest.json or a shard
      const std::string dir = enclosing_model_dir(model_dir);
      throw Error(model_dir + ": is a file, not a model directory",
                  dir.empty() ? std::string("pass the directory written by `tpshard convert` (it holds manifest.json)")
                              : "pass the model directory that holds manifest.json: " + dir);
    }
    // a checkpoint not converted yet (a Hugging Face or llama2.c directory): say how to convert it
    std::string hint = "point at a directory written by `tpshard convert` (it holds manifest.json)";
    if (err == ENOENT && std::filesystem::is_directory(model_dir, ec)) {
      if (std::filesystem::exists(std::filesystem::path(model_dir) / "config.json", ec))
        hint = model_dir + " is a Hugging Face checkpoint, not converted yet: `tpshard convert " + model_dir +
               " -o OUT --tp N`, then run OUT";
      else if (const std::string dir = enclosing_model_dir(model_dir); !dir.empty())
        hint = "pass the model directory that holds manifest.json: " + dir;  // e.g. MODEL/tp2
      else if (const std::string h = missing_config_hint(model_dir); h.rfind("check that", 0) != 0)
        hint = h;  // llama2.c or GGUF
    }
    if (err == ENOENT && !std::filesystem::exists(model_dir, ec)) {
      // no such directory at all: say so; a Hugging Face repo id (ORG/NAME) is converted first
      const std::filesystem::path p(model_dir);
      const bool repo_id = p.is_relative() && std::distance(p.begin(), p.end()) == 2 && model_dir.find("..") == std::string::npos &&
                           model_dir.rfind("./", 0) != 0;
      throw Error(model_dir + ": no such directory",
                  repo_id ? "this needs a converted model; a Hugging Face repo id is converted first: `tpshard convert " +
                                model_dir + " -o OUT --tp N`, then run OUT"
                          : hint);
    }
    throw Error(path + ": cannot open" + (err ? std::string(" (") + std::strerror(err) + ")" : std::string()), hint);
  }
  json j;
  try {
    j = json::parse(f, json_depth_guard(path));
  } catch (const json::exception& e) {
    throw Error(path + ": invalid JSON: " + json_error_text(e), kRerun);
  }
  if (!j.is_object()) throw Error(path + ": not a JSON object", kRerun);
  if (j.contains("format") && j["format"] != "tpshard")  // always written; older manifests have it too
    throw Error(path + ": \"format\" is " + j["format"].dump() + ", not \"tpshard\"", kRerun);
  Manifest m;
  m.format_version = field<int>(j, "format_version", path);
  if (m.format_version != kFormatVersion)
    throw Error(path + ": format_version " + std::to_string(m.format_version) + " is not supported (this build reads " +
                    std::to_string(kFormatVersion) + ")",
                "re-run tpshard convert with this version of tpshard");
  m.tool_version = field<std::string>(j, "tool_version", path);
  for (const auto& s : field<json>(j, "source", path)) {
    SourceFile sf;
    sf.name = field<std::string>(s, "name", path + " source");
    sf.bytes = field<uint64_t>(s, "bytes", path + " source " + sf.name);
    sf.xxh3 = hash_from_hex(field<std::string>(s, "xxh3", path + " source " + sf.name), path + " source " + sf.name);
    m.source.push_back(sf);
  }
  const json model = field<json>(j, "model", path);
  if (j.contains("model_section_xxh3")) {  // absent in manifests written before it was recorded
    const std::string where = path + " \"model_section_xxh3\"";
    const auto& recorded = j["model_section_xxh3"];
    if (!recorded.is_string() || recorded.get<std::string>().size() != 16 ||
        recorded.get<std::string>().find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
      throw Error(where + ": " + recorded.dump() + " is not 16 hex digits",
                  "re-run tpshard convert; if the model section was edited deliberately, delete the "
                  "\"model_section_xxh3\" line of manifest.json");
    const uint64_t want = hash_from_hex(recorded.get<std::string>(), where);
    const uint64_t has = model_section_xxh3(model);
    if (has != want)
      throw Error(path + ": the \"model\" section was changed after tpshard convert wrote it (recorded XXH3 " +
                      hash_to_hex(want) + ", now " + hash_to_hex(has) + ")",
                  "re-run tpshard convert to get a consistent model directory; if the edit is deliberate, delete the "
                  "\"model_section_xxh3\" line of manifest.json");
  }
  try {
    m.model = model_config_from_json(model, path);
  } catch (const Error& e) {  // its hints speak of config.json, which a converted directory does not have
    throw Error(e.what(), "manifest.json's \"model\" section is not what tpshard convert wrote (edited after "
                          "conversion?): restore manifest.json from the conversion, or re-run tpshard convert");
  }
  const std::string dtype = field<std::string>(j, "dtype", path);
  try {
    m.dtype = dtype_from_string(dtype);
  } catch (const Error& e) {
    throw Error(path + ": \"dtype\": " + e.what(), kRerun);
  }
  if (j.contains("tokenizer_files")) m.tokenizer_files = field<std::vector<std::string>>(j, "tokenizer_files", path);
  auto entry = [&](const json& e, const std::string& where) {
    ManifestShard s;
    s.tp_rank = field<int>(e, "tp_rank", where);
    s.file = field<std::string>(e, "file", where);
    s.bytes = field<uint64_t>(e, "bytes", where);
    s.xxh3 = hash_from_hex(field<std::string>(e, "xxh3", where), where);
    s.weight_bytes = field<uint64_t>(e, "weight_bytes", where);
    if (e.contains("table_xxh3")) s.table_xxh3 = hash_from_hex(field<std::string>(e, "table_xxh3", where), where);
    if (e.contains("ranges")) s.ranges = ranges_from_json(field<json>(e, "ranges", where), where);
    if (e.contains("pp_stage")) s.pp_stage = field<int>(e, "pp_stage", where);
    if (e.contains("layers")) s.layers = range_from_json(field<json>(e, "layers", where), where + " layers");
    if (s.file.empty() || s.file[0] == '/' || s.file.find("..") != std::string::npos)
      throw Error(where + ": shard file name '" + s.file + "' must be relative to the model directory", kRerun);
    return s;
  };
  auto size_key = [&](const std::string& key, const std::string& where, const char* what) {
    int v = 0;
    try {
      v = std::stoi(key);
    } catch (...) {
    }
    if (v < 1 || std::to_string(v) != key) throw Error(where + ": not a " + what, kRerun);
    return v;
  };
  // shards of one layout, ordered by (pp_stage, tp_rank)
  auto layout_entries = [&](const json& arr, int pp_size, int tp_size, const std::string& where) {
    if (!arr.is_array() || arr.size() != static_cast<size_t>(pp_size) * static_cast<size_t>(tp_size))
      throw Error(where + ": expected " + std::to_string(pp_size * tp_size) + " shard entries", kRerun);
    std::vector<ManifestShard> v;
    for (const auto& e : arr) {
      ManifestShard s = entry(e, where);
      const size_t at = v.size();
      if (s.tp_rank != static_cast<int>(at % static_cast<size_t>(tp_size)) ||
          s.pp_stage != static_cast<int>(at / static_cast<size_t>(tp_size)))
        throw Error(where + ": shards are not ordered by pp_stage, then tp_rank", kRerun);
      if (pp_size > 1 && !s.layers) throw Error(where + ": a pipeline stage's shard entry has no \"layers\"", kRerun);
      v.push_back(std::move(s));
    }
    return v;
  };
  const json tp = j.contains("tp") ? field<json>(j, "tp", path) : json::object();
  const json pp = j.contains("pp") ? field<json>(j, "pp", path) : json::object();
  if (!tp.is_object() || !pp.is_object() || (tp.empty() && pp.empty()))
    throw Error(path + ": \"tp\" lists no tp sizes", kRerun);
  for (const auto& [key, arr] : tp.items()) {
    const std::string where = path + " tp " + key;
    const int tp_size = size_key(key, where, "tp size");
    m.shards[tp_size] = layout_entries(arr, 1, tp_size, where);
  }
  for (const auto& [pkey, by_tp] : pp.items()) {
    const int pp_size = size_key(pkey, path + " pp " + pkey, "pp size");
    if (pp_size < 2 || !by_tp.is_object() || by_tp.empty())
      throw Error(path + " pp " + pkey + ": expected a pp size above 1 with tp sizes under it", kRerun);
    for (const auto& [tkey, arr] : by_tp.items()) {
      const std::string where = path + " pp " + pkey + " tp " + tkey;
      const int tp_size = size_key(tkey, where, "tp size");
      m.pp_shards[{pp_size, tp_size}] = layout_entries(arr, pp_size, tp_size, where);
    }
  }
  return m;
}

void save_manifest(const Manifest& m, const std::string& dir) {
  json j;
  j["format"] = "tpshard";
  j["format_version"] = m.format_version;
  j["tool_version"] = m.tool_version;
  json src = json::array();
  for (const auto& s : m.source) src.push_back({{"name", s.name}, {"bytes", s.bytes}, {"xxh3", hash_to_hex(s.xxh3)}});
  j["source"] = src;
  j["model"] = model_config_to_json(m.model);
  j["model_section_xxh3"] = hash_to_hex(model_section_xxh3(j["model"]));
  j["dtype"] = dtype_name(m.dtype);
  j["tokenizer_files"] = m.tokenizer_files;
  auto entries = [](const std::vector<ManifestShard>& shards, bool pipeline) {
    json arr = json::array();
    for (const auto& s : shards) {
      arr.push_back({{"tp_rank", s.tp_rank},
                     {"file", s.file},
                     {"bytes", s.bytes},
                     {"xxh3", hash_to_hex(s.xxh3)},
                     {"weight_bytes", s.weight_bytes}});
      if (s.table_xxh3) arr.back()["table_xxh3"] = hash_to_hex(*s.table_xxh3);
      if (s.ranges) arr.back()["ranges"] = ranges_to_json(*s.ranges);
      if (pipeline) {
        arr.back()["pp_stage"] = s.pp_stage;
        if (s.layers) arr.back()["layers"] = json::array({s.layers->begin, s.layers->end});
      }
    }
    return arr;
  };
  json tp = json::object();
  for (const auto& [size, shards] : m.shards) tp[std::to_string(size)] = entries(shards, false);
  json pp = json::object();
  for (const auto& [key, shards] : m.pp_shards) pp[std::to_string(key.first)][std::to_string(key.second)] = entries(shards, true);
  if (!pp.empty()) j["pp"] = pp;
  j["tp"] = tp;
  const std::string text = j.dump(2) + "\n";
  const std::string path = dir + "/manifest.json", tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(tmp + ": cannot create: " + std::strerror(errno), "check that the directory is writable");
  const ssize_t put = ::write(fd, text.data(), text.size());
  const bool ok = put == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw Error(path + ": write failed", "the disk may be full; free space and retry");
  }
}

void check_manifest_ranges(const Manifest& m, int tp_size, const std::string& model_dir, int pp_size) {
  const std::vector<ManifestShard>& all = shards_for(m, tp_size, model_dir, pp_size);
  const std::string layout = pp_size == 1 ? "tp " + std::to_string(tp_size)
                                          : "pp " + std::to_string(pp_size) + " x tp " + std::to_string(tp_size);
  const char* fix = "manifest.json's ranges were edited or written by another tool: restore it from the conversion, or re-run tpshard convert";
  const ParallelLayout want = make_parallel_layout(m.model, tp_size, pp_size);
  auto text = [](const Range& r) { return "[" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ")"; };
  for (int p = 0; p < pp_size; ++p) {
    const std::string where = model_dir + "/manifest.json " + layout + (pp_size > 1 ? " stage " + std::to_string(p) : "");
    const auto first = all.begin() + static_cast<std::ptrdiff_t>(p) * tp_size;
    const std::vector<ManifestShard> shards(first, first + tp_size);
    if (pp_size > 1) {
      const Range& have = *shards[0].layers;
      for (const ManifestShard& s : shards)
        if (!(*s.layers == have))
          throw Error(where + ": layers " + text(*s.layers) + " of tp_rank " + std::to_string(s.tp_rank) +
                          " differ from tp_rank 0's " + text(have), fix);
      const Range& need = want.stage_layers[static_cast<size_t>(p)];
      if (!(have == need))
        throw Error(where + ": layers " + text(have) + " differ from " + text(need) +
                        ", the stage's layers for this model's config", fix);
    }
    struct Kind {
      const char* name;
      Range TpRankRanges::*member;
      int64_t total;
    };
    const Kind kinds[] = {{"heads", &TpRankRanges::heads, m.model.num_attention_heads},
                          {"mlp_columns", &TpRankRanges::mlp_columns, m.model.intermediate_size},
                          {"vocab_rows", &TpRankRanges::vocab_rows, want.vocab_size_padded}};
    bool recorded = true;
    for (const Kind& k : kinds) {
      int64_t next = 0;
      for (const ManifestShard& s : shards) {
        if (!s.ranges) {
          recorded = false;
          break;
        }
        const Range r = (*s.ranges).*k.member;
        const std::string who = where + ": " + k.name + " " + text(r) + " of tp_rank " + std::to_string(s.tp_rank);
        if (r.begin < next) throw Error(who + " overlaps the previous rank's (which end at " + std::to_string(next) + ")", fix);
        if (r.begin > next) throw Error(who + " leaves a gap after the previous rank's (which end at " + std::to_string(next) + ")", fix);
        if (r.end <= r.begin) throw Error(who + " is empty", fix);
        next = r.end;
      }
      if (!recorded) break;
      if (next != k.total)
        throw Error(where + ": " + k.name + " end at " + std::to_string(next) + " but the model has " + std::to_string(k.total), fix);
    }
    if (!recorded) continue;
    for (const ManifestShard& s : shards) {
      const TpRankRanges& have = *s.ranges;
      const TpRankRanges& need = want.tp(s.tp_rank);
      const std::pair<const char*, Range TpRankRanges::*> members[] = {{"heads", &TpRankRanges::heads},
                                                                      {"kv_heads", &TpRankRanges::kv_heads},
                                                                      {"mlp_columns", &TpRankRanges::mlp_columns},
                                                                      {"vocab_rows", &TpRankRanges::vocab_rows}};
      for (const auto& [name, member] : members)
        if (!(have.*member == need.*member))
          throw Error(where + ": " + name + " " + text(have.*member) + " of tp_rank " + std::to_string(s.tp_rank) +
                          " differ from " + text(need.*member) + ", the layout of this model's config at tp_size " +
                          std::to_string(tp_size),
                      fix);
    }
  }
}

std::string shard_file_name(int pp_size, int pp_stage, int tp_size, int tp_rank) {
  if (pp_size == 1) return "tp" + std::to_string(tp_size) + "/rank" + std::to_string(tp_rank) + ".tps";
  return "pp" + std::to_string(pp_size) + "-tp" + std::to_string(tp_size) + "/stage" + std::to_string(pp_stage) + "-rank" +
         std::to_string(tp_rank) + ".tps";
}

std::string manifest_layouts_text(const Manifest& m) {
  std::string have;
  for (const auto& [s, v] : m.shards) have += (have.empty() ? "tp " : ", ") + std::to_string(s);
  for (const auto& [k, v] : m.pp_shards)
    have += (have.empty() ? "" : ", ") + std::string("pp ") + std::to_string(k.first) + " x tp " + std::to_string(k.second);
  return have;
}

const std::vector<ManifestShard>& shards_for(const Manifest& m, int tp_size, const std::string& model_dir, int pp_size) {
  if (pp_size == 1) {
    auto it = m.shards.find(tp_size);
    if (it != m.shards.end()) return it->second;
    throw Error(model_dir + "/manifest.json: no shards for tp_size " + std::to_string(tp_size) + " (it has " +
                    manifest_layouts_text(m) + ")",
                "run with one of those tp sizes, or add it: `tpshard convert HF_DIR -o " + model_dir + " --add-tp " +
                    std::to_string(tp_size) + "` (the layouts there, and results of resumable jobs, stay valid)");
  }
  auto it = m.pp_shards.find({pp_size, tp_size});
  if (it != m.pp_shards.end()) return it->second;
  throw Error(model_dir + "/manifest.json: no shards for pp_size " + std::to_string(pp_size) + " x tp_size " +
                  std::to_string(tp_size) + " (it has " + manifest_layouts_text(m) + ")",
              "run with one of those layouts, or add it: `tpshard convert HF_DIR -o " + model_dir + " --add-tp " +
                  std::to_string(tp_size) + " --pp " + std::to_string(pp_size) +
                  "` (the layouts there, and results of resumable jobs, stay valid)");
}

void check_shard_belongs(const ShardReader& shard, const ManifestShard& entry, const std::string& model_dir) {
  if (!entry.table_xxh3) return;  // an older manifest: nothing recorded to compare
  const uint64_t has = shard.header().table_xxh3;
  if (has == *entry.table_xxh3) return;
  throw Error(shard.path() + " does not belong to this model (manifest " + model_dir +
                  "/manifest.json records table hash " + hash_to_hex(*entry.table_xxh3) + ", the shard has " +
                  hash_to_hex(has) + ")",
              "re-run tpshard convert, or copy the whole converted directory");
}

void check_shard_dtype(const ShardReader& shard, DType dtype) {
  for (const TensorRecord& t : shard.tensors())
    if (t.dtype != dtype)
      throw Error(shard.path() + ": tensor " + t.name + " is " + dtype_name(t.dtype) + ", manifest.json's \"dtype\" says " +
                      dtype_name(dtype),
                  "manifest.json was edited after conversion: restore it from the conversion, or re-run tpshard convert");
}

}  // namespace tpshard
