// model_config.cpp: Hugging Face config.json -> ModelConfig (old and new transformers spellings),
// and ModelConfig <-> the "model" object of manifest.json. Architecture-specific fields: model/arch/.
#include "model/model_config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "format/error.h"
#include "format/json_depth.h"
#include "format/json_error.h"
#include "model/arch/registry.h"
#include "model/config_fields.h"
#include "model/multimodal.h"

namespace tpshard {

namespace {

using nlohmann::json;

using namespace config_fields;

std::vector<int64_t> token_ids(const json& j, const char* key, const std::string& path) {
  std::vector<int64_t> out;
  if (!has(j, key)) return out;
  const json& v = j[key];
  if (v.is_number_integer()) {
    out.push_back(v.get<int64_t>());
  } else if (v.is_array()) {
    for (const auto& e : v) {
      if (!e.is_number_integer()) throw Error(path + ": \"" + key + "\" must hold integers", "fix the file");
      out.push_back(e.get<int64_t>());
    }
  } else {
    throw Error(path + ": \"" + key + "\" must be an integer or a list of integers", "fix the file");
  }
  return out;
}

/// Throws Error naming `path` when a bos / eos id of c is outside [0, vocab_size): the embedding has no
/// row for it (a BOS outside it would be read out of bounds; an EOS outside it could never be generated).
void check_special_ids(const ModelConfig& c, const std::string& path) {
  for (const auto* ids : {&c.bos_token_ids, &c.eos_token_ids})
    for (int64_t id : *ids)
      if (id < 0 || id >= c.vocab_size)
        throw Error(path + ": " + (ids == &c.bos_token_ids ? "bos_token_id " : "eos_token_id ") + std::to_string(id) +
                        " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")",
                    "fix the file (the model's original config holds the right ids)");
}

/// Yarn's cos / sin multiplier: attention_factor when given, else transformers' get_mscale(factor) =
/// 0.1 ln(factor) + 1 (1 for factor <= 1), or get_mscale(factor, mscale) / get_mscale(factor,
/// mscale_all_dim) when both mscale and mscale_all_dim are set and non-zero.
double yarn_attention_factor(const json& rs, double factor, const std::string& path) {
  if (has(rs, "attention_factor")) return opt_num(rs, "attention_factor", 1.0, path);
  const auto get_mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
  const double mscale = opt_num(rs, "mscale", 0.0, path), mscale_all_dim = opt_num(rs, "mscale_all_dim", 0.0, path);
  if (mscale != 0.0 && mscale_all_dim != 0.0) return get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim);
  return get_mscale(factor, 1.0);
}

/// A LongRope factor list (rope_scaling.short_factor / long_factor): 1..kMaxHeadDim / 2 finite positive
/// numbers (the count is checked against the rotary dims once they are known: check_longrope_factors).
std::vector<double> rope_factor_list(const json& rs, const char* name, const std::string& path, const std::string& key) {
  const std::string where = path + ": " + key + "." + name;
  if (!has(rs, name) || !rs[name].is_array() || rs[name].empty())
    throw Error(where + " must be a non-empty list of numbers (longrope)", "fix config.json");
  if (rs[name].size() > static_cast<size_t>(kMaxDimension / 2))
    throw Error(where + " has " + std::to_string(rs[name].size()) + " entries, more than any head_dim allows", "fix config.json");
  std::vector<double> out;
  out.reserve(rs[name].size());
  for (const json& v : rs[name]) {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || !(v.get<double>() > 0))
      throw Error(where + " must hold positive numbers, found " + v.dump(), "fix config.json");
    out.push_back(v.get<double>());
  }
  return out;
}

/// One rope object (rope_scaling or rope_parameters, named `key` in errors): type / rope_type and factors.
void parse_rope_object(const json& rs, ModelConfig& c, const std::string& path, const std::string& key) {
  if (!rs.is_object()) throw Error(path + ": " + key + " must be an object or null", "fix config.json");
  if (has(rs, "rope_theta")) c.rope_theta = opt_num(rs, "rope_theta", c.rope_theta, path);
  if (has(rs, "partial_rotary_factor"))
    c.rotary_ndims = static_cast<int64_t>(static_cast<double>(c.head_dim) * opt_num(rs, "partial_rotary_factor", 1.0, path));
  std::string type = "default";
  if (has(rs, "rope_type")) type = rs["rope_type"].get<std::string>();
  else if (has(rs, "type")) type = rs["type"].get<std::string>();
  if (type == "default") {
    c.rope_type = RopeType::Default;
  } else if (type == "linear") {
    c.rope_type = RopeType::Linear;
    c.rope_factor = opt_num(rs, "factor", 1.0, path);
  } else if (type == "dynamic") {
    c.rope_type = RopeType::Dynamic;
    c.rope_factor = opt_num(rs, "factor", 1.0, path);
  } else if (type == "llama3") {
    c.rope_type = RopeType::Llama3;
    c.rope_factor = opt_num(rs, "factor", 8.0, path);
    c.rope_low_freq_factor = opt_num(rs, "low_freq_factor", 1.0, path);
    c.rope_high_freq_factor = opt_num(rs, "high_freq_factor", 4.0, path);
    c.rope_original_max_position_embeddings = opt_int(rs, "original_max_position_embeddings", 8192, path);
  } else if (type == "yarn") {
    // transformers' _compute_yarn_parameters (modeling_rope_utils.py)
    c.rope_type = RopeType::Yarn;
    c.rope_original_max_position_embeddings =
        opt_int(rs, "original_max_position_embeddings", c.max_position_embeddings, path);
    if (c.rope_original_max_position_embeddings <= 0)
      throw Error(path + ": " + key + ".original_max_position_embeddings must be positive", "fix config.json");
    c.rope_factor = has(rs, "factor") ? opt_num(rs, "factor", 1.0, path)
                                      : static_cast<double>(c.max_position_embeddings) /
                                            static_cast<double>(c.rope_original_max_position_embeddings);
    const double beta_fast = opt_num(rs, "beta_fast", 0.0, path), beta_slow = opt_num(rs, "beta_slow", 0.0, path);
    c.rope_beta_fast = beta_fast != 0.0 ? beta_fast : 32.0;  // `get("beta_fast") or 32`
    c.rope_beta_slow = beta_slow != 0.0 ? beta_slow : 1.0;
    c.rope_truncate = opt_bool(rs, "truncate", true, path);
    c.rope_attention_factor = yarn_attention_factor(rs, c.rope_factor, path);
  } else if (type == "longrope" || type == "su") {
    // transformers' _compute_longrope_parameters: factor defaults to max_position_embeddings /
    // original_max_position_embeddings, attention_factor to sqrt(1 + ln(factor) / ln(original)) (1 when factor <= 1)
    c.rope_type = RopeType::LongRope;
    c.rope_original_max_position_embeddings =
        opt_int(rs, "original_max_position_embeddings", c.max_position_embeddings, path);
    const double orig = static_cast<double>(c.rope_original_max_position_embeddings);
    if (!(orig > 1)) throw Error(path + ": " + key + ".original_max_position_embeddings must be above 1", "fix config.json");
    c.rope_factor = has(rs, "factor") ? opt_num(rs, "factor", 1.0, path)
                                      : static_cast<double>(c.max_position_embeddings) / orig;
    c.rope_attention_factor = has(rs, "attention_factor") ? opt_num(rs, "attention_factor", 1.0, path)
                              : c.rope_factor <= 1.0     ? 1.0
                                                         : std::sqrt(1.0 + std::log(c.rope_factor) / std::log(orig));
    c.rope_short_factor = rope_factor_list(rs, "short_factor", path, key);
    c.rope_long_factor = rope_factor_list(rs, "long_factor", path, key);
  } else {
    throw Error(path + ": unsupported rope scaling type \"" + type + "\" (" + key + ")",
                "supported rope_scaling types: default (null), linear, dynamic, llama3, yarn, longrope");
  }
  if (c.rope_factor <= 0) throw Error(path + ": " + key + ".factor must be positive", "fix config.json");
  if (!(c.rope_attention_factor > 0) || !std::isfinite(c.rope_attention_factor))
    throw Error(path + ": " + key + ".attention_factor must be positive", "fix config.json");
}

/// The rope scaling settings of two parses agree (type and factors; rope_theta is usually given outside
/// rope_scaling, so it is not compared).
bool same_rope(const ModelConfig& a, const ModelConfig& b) {
  return a.rope_type == b.rope_type && a.rope_factor == b.rope_factor && a.rope_low_freq_factor == b.rope_low_freq_factor &&
         a.rope_high_freq_factor == b.rope_high_freq_factor &&
         a.rope_original_max_position_embeddings == b.rope_original_max_position_embeddings &&
         a.rope_beta_fast == b.rope_beta_fast && a.rope_beta_slow == b.rope_beta_slow && a.rope_truncate == b.rope_truncate &&
         a.rope_attention_factor == b.rope_attention_factor && a.rope_short_factor == b.rope_short_factor &&
         a.rope_long_factor == b.rope_long_factor;
}

/// rope_scaling (transformers < 5) or rope_parameters (transformers >= 5). When a config has both (an
/// edited or half-migrated file), they must agree: which one a reader uses differs between versions, so
/// a scaling present in one only would be applied by some readers and not others. Throws Error otherwise.
void parse_rope(const json& j, ModelConfig& c, const std::string& path) {
  if (has(j, "rope_parameters") && !j["rope_parameters"].is_object())
    throw Error(path + ": rope_parameters must be an object or null", "fix config.json");
  const bool params = has(j, "rope_parameters");
  const bool scaling = has(j, "rope_scaling");  // has(): present and not null
  if (params && scaling) {
    ModelConfig from_scaling = c;
    parse_rope_object(j["rope_scaling"], from_scaling, path, "rope_scaling");
    parse_rope_object(j["rope_parameters"], c, path, "rope_parameters");
    if (!same_rope(c, from_scaling))
      throw Error(path + ": rope_parameters " + j["rope_parameters"].dump() + " and rope_scaling " +
                      j["rope_scaling"].dump() + " disagree",
                  "keep the one the model was trained with and delete the other from config.json");
    return;
  }
  if (params) parse_rope_object(j["rope_parameters"], c, path, "rope_parameters");
  else if (scaling) parse_rope_object(j["rope_scaling"], c, path, "rope_scaling");
}

/// parse_rope, then transformers' standardize_rope_params rule for yarn and longrope: a top-level
/// original_max_position_embeddings (Phi-3 style) wins over the one in the rope object. The factor and
/// attention factor are recomputed from it when the rope object leaves them out.
void parse_rope_top(const json& j, ModelConfig& c, const std::string& path) {
  parse_rope(j, c, path);
  if ((c.rope_type != RopeType::Yarn && c.rope_type != RopeType::LongRope) || !has(j, "original_max_position_embeddings"))
    return;
  json rs = has(j, "rope_parameters") ? j["rope_parameters"] : j["rope_scaling"];
  rs["original_max_position_embeddings"] = j["original_max_position_embeddings"];
  parse_rope_object(rs, c, path, has(j, "rope_parameters") ? "rope_parameters" : "rope_scaling");
}

}  // namespace

/// LongRope: one short and one long factor per rotary frequency (rotary_ndims / 2 each).
static void check_longrope_factors(const ModelConfig& c, const std::string& path) {
  if (c.rope_type != RopeType::LongRope) return;
  const size_t want = static_cast<size_t>(c.rotary_ndims / 2);
  if (c.rope_short_factor.size() != want || c.rope_long_factor.size() != want)
    throw Error(path + ": rope_scaling longrope has " + std::to_string(c.rope_short_factor.size()) + " short and " +
                    std::to_string(c.rope_long_factor.size()) + " long factors; the rotary dims " +
                    std::to_string(c.rotary_ndims) + " need " + std::to_string(want) + " of each",
                "fix config.json (head_dim * partial_rotary_factor / 2 factors per list)");
}

/// Sizes multiply into tensor shapes and byte counts: each at most kMaxDimension, so that products of a
/// few of them stay far inside int64. Throws Error naming the field and the file.
static void check_dimensions(const ModelConfig& c, const std::string& path) {
  const std::pair<const char*, int64_t> dims[] = {{"hidden_size", c.hidden_size},
                                                  {"intermediate_size", c.intermediate_size},
                                                  {"num_attention_heads", c.num_attention_heads},
                                                  {"head_dim", c.head_dim},
                                                  {"vocab_size", c.vocab_size},
                                                  {"num_attention_heads x head_dim", c.num_attention_heads * c.head_dim}};
  for (const auto& [name, v] : dims)
    if (v > kMaxDimension)
      throw Error(path + ": " + name + " " + std::to_string(v) + " is more than the " + std::to_string(kMaxDimension) +
                      " tpshard accepts",
                  "fix the file (published models are far below it)");
}

static ModelConfig parse_hf_config_impl(const json& j, const std::string& path);

ModelConfig parse_hf_config(const json& j, const std::string& path) {
  try {
    return parse_hf_config_impl(j, path);
  } catch (const json::exception& e) {
    // A field of the wrong JSON type (e.g. "hidden_act": 3): name the file, never crash.
    throw Error(path + ": unexpected value type: " + json_error_text(e), "fix config.json (compare with the model's original config)");
  }
}

static ModelConfig parse_hf_config_impl(const json& j, const std::string& path) {
  if (!j.is_object()) throw Error(path + ": not a JSON object", "point tpshard at a Hugging Face model directory");
  ModelConfig c;
  if (!has(j, "architectures") || !j["architectures"].is_array() || j["architectures"].empty() ||
      !j["architectures"][0].is_string())
    throw Error(path + ": field \"architectures\" is missing", "supported architectures: " + supported_architectures());
  c.architecture = j["architectures"][0].get<std::string>();
  c.model_type = has(j, "model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
  const ArchSpec* spec = find_arch(c.architecture);
  if (!spec) {
    // A multimodal checkpoint nesting a supported language model (model/multimodal.h): parse that.
    std::string key;
    if (auto lm = multimodal::language_model_config(j, path, &key)) {
      ModelConfig inner = parse_hf_config_impl(*lm, path + " (" + key + ")");
      inner.multimodal_architecture = c.architecture;
      return inner;
    }
    throw Error(path + ": unsupported architecture \"" + c.architecture + "\"",
                "supported architectures: " + supported_architectures() +
                    " (also as the language model of a multimodal config, under llm_config / text_config)");
  }
  c.arch = spec->arch;

  // Other spellings of the standard names (their config classes map the standard names onto them):
  // GPT-Neo's num_layers / num_heads, GPT-J's (GPT-2's) n_embd / n_layer / n_head / n_positions.
  auto key = [&](const char* standard, std::initializer_list<const char*> aliases) {
    if (has(j, standard)) return standard;
    for (const char* a : aliases)
      if (has(j, a)) return a;
    return standard;  // absent: req_int names the standard field
  };
  c.hidden_size = req_int(j, key("hidden_size", {"n_embd"}), path);
  c.num_hidden_layers = req_int(j, key("num_hidden_layers", {"num_layers", "n_layer"}), path);
  if (c.num_hidden_layers > kMaxHiddenLayers)  // before anything is planned per layer
    throw Error(path + ": num_hidden_layers " + std::to_string(c.num_hidden_layers) + " is more than the " +
                    std::to_string(kMaxHiddenLayers) + " tpshard accepts",
                "fix config.json (published models have at most a few hundred layers)");
  c.num_attention_heads = req_int(j, key("num_attention_heads", {"num_heads", "n_head"}), path);
  c.vocab_size = req_int(j, "vocab_size", path);
  // Required, unless the architecture's config class has a default that published files rely on (Falcon).
  const char* max_positions = key("max_position_embeddings", {"n_positions"});
  c.max_position_embeddings = has(j, max_positions) ? req_int(j, max_positions, path) : 0;
  c.num_key_value_heads = opt_int(j, "num_key_value_heads", c.num_attention_heads, path);
  if (c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads != 0)
    throw Error(path + ": num_attention_heads " + std::to_string(c.num_attention_heads) +
                    " is not a multiple of num_key_value_heads " + std::to_string(c.num_key_value_heads),
                "fix config.json");
  if (has(j, "head_dim")) {
    c.head_dim = req_int(j, "head_dim", path);
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      throw Error(path + ": hidden_size " + std::to_string(c.hidden_size) + " is not divisible by num_attention_heads " +
                      std::to_string(c.num_attention_heads) + " and there is no head_dim",
                  "add head_dim to config.json");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }

  // torch_dtype (transformers < 4.56) or dtype (newer); "torch.float16" spellings are accepted.
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (has(j, key) && j[key].is_string()) {
      std::string s = j[key].get<std::string>();
      if (s.rfind("torch.", 0) == 0) s = s.substr(6);
      c.torch_dtype = s;
      break;
    }
  }
  c.tie_word_embeddings = opt_bool(j, "tie_word_embeddings", false, path);
  c.bos_token_ids = token_ids(j, "bos_token_id", path);
  c.eos_token_ids = token_ids(j, "eos_token_id", path);

  const double partial = spec->parse_config(j, c, path);
  if (!has(j, max_positions) && c.max_position_embeddings == 0) req_int(j, max_positions, path);  // throws: missing
  check_dimensions(c, path);
  if (c.position_embedding == PositionKind::Learned) {
    c.rotary_ndims = 0;  // no rotary: positions come from the learned table
  } else {
    if (partial <= 0.0 || partial > 1.0)
      throw Error(path + ": rotary_pct / partial_rotary_factor must be in (0, 1], got " + std::to_string(partial), "fix config.json");
    c.rotary_ndims = static_cast<int64_t>(static_cast<double>(c.head_dim) * partial);
    parse_rope_top(j, c, path);
    if (c.rotary_ndims <= 0 || c.rotary_ndims % 2 != 0 || c.rotary_ndims > c.head_dim)
      throw Error(path + ": rotary dims " + std::to_string(c.rotary_ndims) + " (head_dim " + std::to_string(c.head_dim) +
                      " * rotary_pct) must be even and in [2, head_dim]",
                  "fix rotary_pct / partial_rotary_factor in config.json");
    check_longrope_factors(c, path);
  }
  if (!c.layer_windows.empty() && static_cast<int64_t>(c.layer_windows.size()) != c.num_hidden_layers)
    throw Error(path + ": " + std::to_string(c.layer_windows.size()) + " per-layer attention types for " +
                    std::to_string(c.num_hidden_layers) + " layers",
                "fix attention_types in config.json (one entry per layer once expanded)");
  for (int64_t w : c.layer_windows)
    if (w < 0) throw Error(path + ": a local attention window is negative", "fix window_size in config.json");
  if (c.attention_scale < 0 || !std::isfinite(c.attention_scale))
    throw Error(path + ": attention_scale must be positive (or 0 for 1/sqrt(head_dim))", "fix the file");
  if (c.rope_theta <= 0) throw Error(path + ": rope_theta must be positive", "fix config.json");
  if (c.intermediate_size <= 0) throw Error(path + ": intermediate_size must be positive", "fix config.json");
  if (!(c.norm_eps > 0) || !std::isfinite(c.norm_eps))
    throw Error(path + ": the norm epsilon (rms_norm_eps / layer_norm_eps) must be positive, got " + std::to_string(c.norm_eps),
                "fix config.json");
  check_special_ids(c, path);
  if (c.sliding_window >= c.max_position_embeddings) c.sliding_window = 0;  // never limits attention
  return c;
}

namespace {

json read_json_file(const std::string& path) {
  std::ifstream f(path);
  if (!f)
    throw Error(path + ": cannot open (" + std::strerror(errno) + ")",
                "check that the directory is a Hugging Face model directory (config.json and *.safetensors)");
  try {
    return json::parse(f, json_depth_guard(path));
  } catch (const json::exception& e) {
    throw Error(path + ": invalid JSON: " + json_error_text(e), "the file is corrupt; download it again");
  }
}

}  // namespace

ModelConfig load_hf_config_file(const std::string& path) { return parse_hf_config(read_json_file(path), path); }

/// What a directory without config.json holds instead, as a hint: a llama2.c checkpoint (a *.bin next to
/// a tok*.bin tokenizer) points at the import script, a GGUF file says it is not a source we convert.
std::string missing_config_hint(const std::string& hf_dir) {
  bool llama2c_model = false, llama2c_tok = false, gguf = false;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(hf_dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool bin = name.size() > 4 && name.compare(name.size() - 4, 4, ".bin") == 0;
    if (bin && name.rfind("tok", 0) == 0) llama2c_tok = true;
    else if (bin && name.find("tok") != std::string::npos && name.find(".tok") != std::string::npos) llama2c_tok = true;
    else if (bin && name.rfind("pytorch_model", 0) != 0) llama2c_model = true;
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".gguf") == 0) gguf = true;
  }
  if (llama2c_model && llama2c_tok)
    return "this looks like a llama2.c checkpoint: import it first with `python3 scripts/llama2c_to_hf.py " + hf_dir +
           " HF_OUT`, then `tpshard convert HF_OUT`";
  if (gguf) return "GGUF files are not a source tpshard converts: convert from the Hugging Face checkpoint (config.json + *.safetensors)";
  return "check that the directory is a Hugging Face model directory (config.json and *.safetensors)";
}

ModelConfig load_hf_config(const std::string& hf_dir) {
  const std::string path = hf_dir + "/config.json";
  if (!std::filesystem::exists(path) && std::filesystem::is_directory(hf_dir))
    throw Error(path + ": cannot open (No such file or directory)", missing_config_hint(hf_dir));
  ModelConfig c = parse_hf_config(read_json_file(path), path);
  const std::string gen_path = hf_dir + "/generation_config.json";
  std::ifstream probe(gen_path);
  if (probe) {
    probe.close();
    const json g = read_json_file(gen_path);
    // generation_config.json is what transformers' generate() uses: it overrides config.json.
    auto bos = token_ids(g, "bos_token_id", gen_path);
    auto eos = token_ids(g, "eos_token_id", gen_path);
    if (!bos.empty()) c.bos_token_ids = bos;
    if (!eos.empty()) c.eos_token_ids = eos;
    check_special_ids(c, gen_path);
  }
  return c;
}

int64_t model_position_limit(const ModelConfig& c) {
  if (c.rope_type == RopeType::LongRope && c.rope_original_max_position_embeddings > 0)
    return c.max_position_embeddings > 0 ? std::min(c.max_position_embeddings, c.rope_original_max_position_embeddings)
                                         : c.rope_original_max_position_embeddings;
  return c.max_position_embeddings > 0 ? c.max_position_embeddings : 0;
}

json model_config_to_json(const ModelConfig& c) {
  json j;
  j["arch"] = arch_spec(c.arch).family;
  j["architectures"] = json::array({c.architecture});
  j["model_type"] = c.model_type;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["norm"] = c.norm == NormKind::LayerNorm ? "layernorm" : "rmsnorm";
  j[c.norm == NormKind::LayerNorm ? "layer_norm_eps" : "rms_norm_eps"] = c.norm_eps;
  j["hidden_act"] = act_name(c.hidden_act);
  j["gated_mlp"] = c.gated_mlp;
  j["use_parallel_residual"] = c.use_parallel_residual;
  if (c.shared_parallel_norm) j["shared_parallel_norm"] = true;
  j["position_embedding"] = c.position_embedding == PositionKind::Learned ? "learned" : "rotary";
  j["rotary_ndims"] = c.rotary_ndims;
  if (c.position_embedding == PositionKind::Rotary)
    j["partial_rotary_factor"] = static_cast<double>(c.rotary_ndims) / static_cast<double>(c.head_dim);
  j["rope_theta"] = c.rope_theta;
  if (c.rope_type == RopeType::Default) {
    j["rope_scaling"] = nullptr;
  } else if (c.rope_type == RopeType::Linear) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", c.rope_factor}};
  } else if (c.rope_type == RopeType::Dynamic) {
    j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", c.rope_factor}};
  } else if (c.rope_type == RopeType::Yarn) {
    j["rope_scaling"] = {{"rope_type", "yarn"},
                         {"factor", c.rope_factor},
                         {"original_max_position_embeddings", c.rope_original_max_position_embeddings},
                         {"beta_fast", c.rope_beta_fast},
                         {"beta_slow", c.rope_beta_slow},
                         {"truncate", c.rope_truncate},
                         {"attention_factor", c.rope_attention_factor}};
  } else if (c.rope_type == RopeType::LongRope) {
    j["rope_scaling"] = {{"rope_type", "longrope"},
                         {"factor", c.rope_factor},
                         {"original_max_position_embeddings", c.rope_original_max_position_embeddings},
                         {"attention_factor", c.rope_attention_factor},
                         {"short_factor", c.rope_short_factor},
                         {"long_factor", c.rope_long_factor}};
  } else {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_factor},
                         {"low_freq_factor", c.rope_low_freq_factor},
                         {"high_freq_factor", c.rope_high_freq_factor},
                         {"original_max_position_embeddings", c.rope_original_max_position_embeddings}};
  }
  j["rope_attention_factor"] = c.rope_attention_factor;
  j["attention_bias"] = c.attention_bias;
  j["attention_out_bias"] = c.attention_out_bias;
  j["mlp_bias"] = c.mlp_bias;
  j["qk_norm"] = c.qk_norm;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["sliding_window"] = c.sliding_window;
  j["layer_windows"] = c.layer_windows;
  j["attention_scale"] = c.attention_scale;
  // 0 (none) as null: config.json's spelling, which a soft-capping architecture reads back
  j["attn_logit_softcapping"] = c.attn_logit_softcapping > 0 ? json(c.attn_logit_softcapping) : json(nullptr);
  j["final_logit_softcapping"] = c.final_logit_softcapping > 0 ? json(c.final_logit_softcapping) : json(nullptr);
  j["post_norms"] = c.post_norms;
  if (!c.pre_norms) j["pre_norms"] = false;
  if (c.qk_norm_across_heads) j["qk_norm_across_heads"] = true;
  if (c.num_local_experts > 0) {
    j["num_local_experts"] = c.num_local_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
  }
  j["norm_weight_offset"] = c.norm_weight_offset;
  j["embedding_scale"] = c.embedding_scale;
  j["torch_dtype"] = c.torch_dtype;
  j["bos_token_id"] = c.bos_token_ids;
  j["eos_token_id"] = c.eos_token_ids;
  return j;
}

ModelConfig model_config_from_json(const json& j, const std::string& path) {
  // Re-parse through the HF path (same names), then restore the normalized fields that HF derives.
  const std::string where = path + " (\"model\")";
  if (!j.is_object()) throw Error(where + ": not an object", "the manifest is corrupt; re-run tpshard convert");
  json hf = j;
  hf.erase("rope_scaling");
  ModelConfig c = parse_hf_config(hf, where);
  c.num_key_value_heads = req_int(j, "num_key_value_heads", where);
  c.head_dim = req_int(j, "head_dim", where);
  const bool learned = c.position_embedding == PositionKind::Learned;
  c.rotary_ndims = learned ? opt_int(j, "rotary_ndims", 0, where) : req_int(j, "rotary_ndims", where);
  if (c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads != 0)
    throw Error(where + ": num_key_value_heads " + std::to_string(c.num_key_value_heads) + " does not divide num_attention_heads " +
                    std::to_string(c.num_attention_heads), "re-run tpshard convert");
  if (learned && c.rotary_ndims != 0)
    throw Error(where + ": rotary_ndims " + std::to_string(c.rotary_ndims) + " with learned position embeddings",
                "re-run tpshard convert");
  if (!learned && (c.head_dim <= 0 || c.rotary_ndims <= 0 || c.rotary_ndims % 2 != 0 || c.rotary_ndims > c.head_dim))
    throw Error(where + ": rotary_ndims " + std::to_string(c.rotary_ndims) + " must be even and in [2, head_dim " +
                    std::to_string(c.head_dim) + "]", "re-run tpshard convert");
  c.rope_theta = opt_num(j, "rope_theta", c.rope_theta, where);
  if (has(j, "rope_scaling")) {
    json rs_only = {{"rope_scaling", j["rope_scaling"]}};
    ModelConfig tmp = c;
    parse_rope(rs_only, tmp, where);
    c.rope_type = tmp.rope_type;
    c.rope_factor = tmp.rope_factor;
    c.rope_low_freq_factor = tmp.rope_low_freq_factor;
    c.rope_high_freq_factor = tmp.rope_high_freq_factor;
    c.rope_original_max_position_embeddings = tmp.rope_original_max_position_embeddings;
    c.rope_beta_fast = tmp.rope_beta_fast;
    c.rope_beta_slow = tmp.rope_beta_slow;
    c.rope_truncate = tmp.rope_truncate;
    c.rope_attention_factor = tmp.rope_attention_factor;
    c.rope_short_factor = tmp.rope_short_factor;
    c.rope_long_factor = tmp.rope_long_factor;
  }
  check_longrope_factors(c, where);
  c.rope_attention_factor = opt_num(j, "rope_attention_factor", c.rope_attention_factor, where);  // older manifests: none
  if (!(c.rope_attention_factor > 0) || !std::isfinite(c.rope_attention_factor))
    throw Error(where + ": rope_attention_factor must be positive", "re-run tpshard convert");
  c.attention_bias = opt_bool(j, "attention_bias", c.attention_bias, where);
  c.attention_out_bias = opt_bool(j, "attention_out_bias", c.attention_out_bias, where);
  c.mlp_bias = opt_bool(j, "mlp_bias", c.mlp_bias, where);
  c.qk_norm = opt_bool(j, "qk_norm", c.qk_norm, where);  // older manifests: none (false)
  c.gated_mlp = opt_bool(j, "gated_mlp", c.gated_mlp, where);
  // The windows as converted (Qwen2 derives them from config.json fields the manifest does not keep).
  if (has(j, "layer_windows")) {
    if (!j["layer_windows"].is_array()) throw Error(where + ": layer_windows is not a list", "re-run tpshard convert");
    c.layer_windows.clear();
    for (const json& w : j["layer_windows"]) {
      if (!w.is_number_integer() || w.get<int64_t>() < 0)
        throw Error(where + ": layer_windows must hold integers >= 0", "re-run tpshard convert");
      c.layer_windows.push_back(w.get<int64_t>());
    }
    if (!c.layer_windows.empty() && static_cast<int64_t>(c.layer_windows.size()) != c.num_hidden_layers)
      throw Error(where + ": " + std::to_string(c.layer_windows.size()) + " layer_windows for " +
                      std::to_string(c.num_hidden_layers) + " layers", "re-run tpshard convert");
  }
  c.sliding_window = opt_int(j, "sliding_window", 0, where);
  check_dimensions(c, where);
  if (c.sliding_window > 0 && c.layer_windows.empty()) {
    // A manifest whose sliding_window has no per-layer windows (older converters): Mistral's applies to
    // every layer; Qwen2's layers depend on max_window_layers / layer_types, which it does not hold.
    if (c.arch != Arch::Mistral)
      throw Error(where + ": sliding_window " + std::to_string(c.sliding_window) +
                      " without layer_windows (the layers that use it)", "re-run tpshard convert");
    c.layer_windows.assign(static_cast<size_t>(c.num_hidden_layers), c.sliding_window);
  }
  // layer_windows: the architecture's parse (above) reads the manifest's field of the same name; a manifest
  // written before it existed has none (all global). "position_embedding" and "attention_scale" follow
  // from the architecture; an edit of either alone is refused (it would otherwise be ignored).
  if (has(j, "attention_scale") && (!j["attention_scale"].is_number() || j["attention_scale"].get<double>() != c.attention_scale))
    throw Error(where + ": \"attention_scale\" is " + j["attention_scale"].dump() + " but " + j["architectures"].dump() +
                    " scales attention scores by " +
                    (c.attention_scale > 0 ? std::to_string(c.attention_scale) : std::string("1/sqrt(head_dim) (0)")),
                "restore manifest.json from the conversion, or re-run tpshard convert");
  // Soft-caps, post-norms, the norm-weight offset and the embedding scale follow from the architecture
  // (and its config.json fields, which the manifest keeps under the same names): an edit is refused.
  const std::pair<const char*, json> derived[] = {
      {"attn_logit_softcapping", c.attn_logit_softcapping > 0 ? json(c.attn_logit_softcapping) : json(nullptr)},
      {"final_logit_softcapping", c.final_logit_softcapping > 0 ? json(c.final_logit_softcapping) : json(nullptr)},
      {"post_norms", c.post_norms},
      {"pre_norms", c.pre_norms},
      {"qk_norm_across_heads", c.qk_norm_across_heads},
      {"norm_weight_offset", c.norm_weight_offset},
      {"embedding_scale", c.embedding_scale}};
  for (const auto& [key, want] : derived) {
    if (!j.contains(key)) continue;  // older manifests: the defaults
    const json& got = j[key];
    const bool same = got.is_number() && want.is_number() ? got.get<double>() == want.get<double>() : got == want;
    if (!same)
      throw Error(where + ": \"" + key + "\" is " + got.dump() + " but " + j["architectures"].dump() + " gives " + want.dump(),
                  "restore manifest.json from the conversion, or re-run tpshard convert");
  }
  if (has(j, "position_embedding")) {
    const std::string want = c.position_embedding == PositionKind::Learned ? "learned" : "rotary";
    if (!j["position_embedding"].is_string() || j["position_embedding"].get<std::string>() != want)
      throw Error(where + ": \"position_embedding\" is " + j["position_embedding"].dump() + " but " +
                      j["architectures"].dump() + " uses " + want + " positions",
                  "restore manifest.json from the conversion, or re-run tpshard convert");
  }
  // "arch" is derived from "architectures" (model_config_to_json): an edit of one alone is refused
  const std::string arch = arch_spec(c.arch).family;
  if (has(j, "arch") && (!j["arch"].is_string() || j["arch"].get<std::string>() != arch))
    throw Error(where + ": \"arch\" is " + j["arch"].dump() + " but \"architectures\" " + j["architectures"].dump() +
                    " is the " + arch + " family",
                "restore manifest.json from the conversion, or re-run tpshard convert");
  return c;
}

}  // namespace tpshard
