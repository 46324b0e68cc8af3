// chat_template.cpp: find a model's chat template and render it with the Jinja interpreter (runtime/jinja/)
// the way transformers' apply_chat_template does.
#include "runtime/chat_template.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "format/error.h"
#include "format/json_depth.h"
#include "format/json_error.h"

namespace tpshard {
namespace {

/// transformers' SPECIAL_TOKENS_ATTRIBUTES that are strings (the ones apply_chat_template passes).
const char* const kSpecialTokens[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                      "pad_token", "cls_token", "mask_token"};

/// tokenizer_config.json token field: a string, an AddedToken object {"content": ...}, or null/absent.
bool token_string(const nlohmann::json& config, const char* key, std::string* out) {
  if (!config.contains(key)) return false;
  const nlohmann::json& v = config.at(key);
  if (v.is_string()) {
    *out = v.get<std::string>();
    return true;
  }
  if (v.is_object() && v.contains("content") && v.at("content").is_string()) {
    *out = v.at("content").get<std::string>();
    return true;
  }
  return false;
}

bool read_file(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

/// MODEL_DIR/tokenizer_config.json as an object (empty object when the file is absent).
nlohmann::json read_tokenizer_config(const std::string& model_dir, bool* present) {
  const std::string path = model_dir + "/tokenizer_config.json";
  std::string text;
  *present = read_file(path, &text) && !text.empty();
  if (!*present) return nlohmann::json::object();
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(text, json_depth_guard(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not valid JSON (" + json_error_text(e) + ")", "restore the file from the source checkpoint");
  }
  if (!config.is_object()) throw Error(path + ": expected a JSON object", "restore the file from the source checkpoint");
  return config;
}

std::map<std::string, std::string> special_tokens_of(const nlohmann::json& config) {
  std::map<std::string, std::string> tokens;
  for (const char* key : kSpecialTokens) {
    std::string v;
    if (token_string(config, key, &v)) tokens[key] = v;
  }
  return tokens;
}

jinja::Value string_value(const std::string& s) { return jinja::Value::string(s); }

}  // namespace

ChatTemplate parse_chat_template(const std::string& template_text, std::map<std::string, std::string> special_tokens,
                                 const std::string& source, const jinja::Limits& limits) {
  ChatTemplate t;
  t.source = source;
  t.program = jinja::compile(template_text, source, limits);
  t.special_tokens = std::move(special_tokens);
  return t;
}

ChatTemplate parse_chat_template(const std::string& template_text, const std::string& bos_token,
                                 const std::string& eos_token, const std::string& source) {
  std::map<std::string, std::string> tokens;
  if (!bos_token.empty()) tokens["bos_token"] = bos_token;
  if (!eos_token.empty()) tokens["eos_token"] = eos_token;
  return parse_chat_template(template_text, std::move(tokens), source);
}

ChatTemplate chatml_template() {
  static const ChatTemplate t = parse_chat_template(
      "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
      "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
      std::map<std::string, std::string>{}, "built-in ChatML template");
  return t;
}

ChatTemplate load_chat_template(const std::string& model_dir) {
  const std::string config_path = model_dir + "/tokenizer_config.json";
  const std::string jinja_path = model_dir + "/chat_template.jinja";
  bool have_config = false;
  const nlohmann::json config = read_tokenizer_config(model_dir, &have_config);
  std::string source = jinja_path;
  std::string text;
  if (!read_file(jinja_path, &text) || text.empty()) {
    source = config_path;
    if (!have_config)
      throw Error(config_path + ": missing or empty, so the model has no chat template",
                  "copy tokenizer_config.json from the Hugging Face checkpoint into the model dir, pass a template with "
                  "--chat-template FILE, or give a plain --prompt instead");
    const nlohmann::json tmpl = config.value("chat_template", nlohmann::json());
    if (tmpl.is_string()) {
      text = tmpl.get<std::string>();
    } else if (tmpl.is_array()) {  // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
      for (const nlohmann::json& entry : tmpl)
        if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
            entry.at("template").is_string())
          text = entry.at("template").get<std::string>();
    }
    if (text.empty())
      throw Error(config_path + ": has no \"chat_template\" (the model is not a chat model, or the file is from an "
                                "old checkpoint)",
                  "pass a template with --chat-template FILE, or use `tprun MODEL generate --prompt ...` (plain text "
                  "completion) instead of chat");
  }
  return parse_chat_template(text, special_tokens_of(config), source);
}

ChatTemplate load_chat_template_file(const std::string& template_file, const std::string& model_dir) {
  std::string text;
  if (!read_file(template_file, &text))
    throw Error(template_file + ": cannot read the chat template file", "check the path given to --chat-template");
  if (text.empty()) throw Error(template_file + ": the chat template file is empty", "give a Jinja chat template file");
  bool have_config = false;
  const nlohmann::json config = read_tokenizer_config(model_dir, &have_config);
  return parse_chat_template(text, special_tokens_of(config), template_file);
}

ChatTemplate load_chat_template(const std::string& model_dir, const std::string& template_file) {
  return template_file.empty() ? load_chat_template(model_dir) : load_chat_template_file(template_file, model_dir);
}

std::string render_chat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt) {
  if (messages.empty())
    throw Error("chat template: cannot render an empty conversation", "give at least one message");
  if (!tmpl.program) throw Error("chat template: no template loaded", "load one with load_chat_template");
  jinja::ValueList list;
  for (const ChatMessage& m : messages) {
    jinja::Dict d;
    d.set(string_value("role"), string_value(m.role));
    d.set(string_value("content"), string_value(m.content));
    list.push_back(jinja::Value::dict(std::move(d)));
  }
  jinja::Dict vars;
  vars.set(string_value("messages"), jinja::Value::list(std::move(list)));
  vars.set(string_value("add_generation_prompt"), jinja::Value::boolean(add_generation_prompt));
  vars.set(string_value("tools"), jinja::Value::none());
  vars.set(string_value("documents"), jinja::Value::none());
  for (const auto& [name, text] : tmpl.special_tokens) vars.set(string_value(name), string_value(text));
  return jinja::render(*tmpl.program, vars);
}

std::string apply_chat_template(const std::string& model_dir, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) {
  return render_chat(load_chat_template(model_dir), messages, add_generation_prompt);
}

}  // namespace tpshard
