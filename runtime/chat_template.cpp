// chat_template.cpp: recognise and render the ChatML, Llama-2 [INST] and Llama-3 chat templates.
// Recognition works on a normalised form of the Jinja source (whitespace outside string literals removed,
// literals unescaped, x['key'] written x.key) searched for the lines that define each form.
// Rendering follows the templates' Jinja semantics (transformers renders with trim_blocks/lstrip_blocks).
#include "runtime/chat_template.h"

#include <cctype>
#include <cstdint>
#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "format/error.h"
#include "format/json_depth.h"
#include "format/json_error.h"

namespace tpshard {
namespace {

const char* const kPlainPromptHint =
    "pass a plain --prompt instead (tprun generate), or add support for this template form to "
    "runtime/chat_template.cpp";

/// Jinja source with whitespace outside string literals removed, each literal re-emitted as '<unescaped>',
/// and the unescaped literals listed. Text outside {{ }} / {% %} is dropped; `found_raw_text` tells whether
/// any of it was not whitespace (our recognised forms have none).
struct NormalisedTemplate {
  std::string code;
  std::vector<std::string> literals;
  bool found_raw_text = false;
};

/// Python/Jinja string-literal escapes (the ones templates use); an unknown escape keeps its backslash.
char unescape_char(char c, bool* known) {
  *known = true;
  switch (c) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    case '\\': return '\\';
    case '\'': return '\'';
    case '"': return '"';
    default: *known = false; return c;
  }
}

NormalisedTemplate normalise_template(const std::string& t, const std::string& source) {
  NormalisedTemplate out;
  size_t i = 0;
  const size_t n = t.size();
  while (i < n) {
    const bool opens = i + 1 < n && t[i] == '{' && (t[i + 1] == '{' || t[i + 1] == '%' || t[i + 1] == '#');
    if (!opens) {
      if (!std::isspace(static_cast<unsigned char>(t[i]))) out.found_raw_text = true;
      ++i;
      continue;
    }
    const char kind = t[i + 1];
    const std::string close = kind == '{' ? "}}" : (kind == '%' ? "%}" : "#}");
    if (kind == '#') {  // comment: skip whole
      const size_t end = t.find(close, i + 2);
      if (end == std::string::npos) throw Error(source + ": chat template has an unterminated {# comment", kPlainPromptHint);
      i = end + 2;
      continue;
    }
    out.code += kind == '{' ? "{{" : "{%";
    i += 2;
    bool closed = false;
    while (i < n) {
      const char c = t[i];
      if (c == '\'' || c == '"') {
        std::string lit;
        ++i;
        while (i < n && t[i] != c) {
          if (t[i] == '\\' && i + 1 < n) {
            bool known = false;
            const char u = unescape_char(t[i + 1], &known);
            if (!known) lit += '\\';
            lit += u;
            i += 2;
          } else {
            lit += t[i++];
          }
        }
        if (i >= n) throw Error(source + ": chat template has an unterminated string literal", kPlainPromptHint);
        ++i;  // closing quote
        out.code += '\'' + lit + '\'';
        out.literals.push_back(lit);
        continue;
      }
      if (t.compare(i, 2, close) == 0) {
        out.code += close;
        i += 2;
        closed = true;
        break;
      }
      // Whitespace-control markers ({{- -}} {%- -%} {%+) do not change what our forms print.
      const bool after_open = out.code.size() >= 2 && (out.code.compare(out.code.size() - 2, 2, "{{") == 0 ||
                                                       out.code.compare(out.code.size() - 2, 2, "{%") == 0);
      const bool trim_marker = (c == '-' || c == '+') && (after_open || t.compare(i + 1, 2, close) == 0);
      if (!std::isspace(static_cast<unsigned char>(c)) && !trim_marker) out.code += c;
      ++i;
    }
    if (!closed) throw Error(source + ": chat template has an unterminated " + std::string(1, '{') + kind + " block",
                             kPlainPromptHint);
  }
  // message['role'] / message["role"] -> message.role (Jinja treats both the same).
  static const std::regex subscript(R"(\['([A-Za-z_][A-Za-z0-9_]*)'\])");
  out.code = std::regex_replace(out.code, subscript, ".$1");
  return out;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const std::string kBosPrefix = "{{bos_token}}";

/// The ChatML template starts with {{ bos_token }} (InternLM2: BOS once, before the first message).
bool chatml_bos_prefix(const NormalisedTemplate& nt) { return nt.code.compare(0, kBosPrefix.size(), kBosPrefix) == 0; }

bool is_chatml(const NormalisedTemplate& nt) {
  const std::string message = "'<|im_start|>'+message.role+'\n'+message.content+'<|im_end|>";
  const bool has_message = contains(nt.code, message + "'+'\n'") || contains(nt.code, message + "\n'");
  const bool has_generation_prompt =
      contains(nt.code, "{%ifadd_generation_prompt%}") && contains(nt.code, "'<|im_start|>assistant\n'");
  // Forms that add or trim text we would not reproduce (BOS/EOS around turns, trimmed content); a single
  // leading {{bos_token}} (InternLM2) is the one BOS use rendered (chatml_bos_prefix).
  const std::string code = chatml_bos_prefix(nt) ? nt.code.substr(kBosPrefix.size()) : nt.code;
  const bool has_extras = contains(code, "bos_token") || contains(code, "eos_token") || contains(code, "|trim") ||
                          contains(code, ".strip(");
  return has_message && has_generation_prompt && !has_extras && !nt.found_raw_text;
}

/// The system prompt a ChatML template injects: a literal "<|im_start|>system\nTEXT<|im_end|>\n".
std::string chatml_default_system(const NormalisedTemplate& nt) {
  const std::string head = "<|im_start|>system\n", tail = "<|im_end|>\n";
  for (const std::string& lit : nt.literals) {
    if (lit.size() > head.size() + tail.size() && lit.compare(0, head.size(), head) == 0 &&
        lit.compare(lit.size() - tail.size(), tail.size(), tail) == 0) {
      const std::string text = lit.substr(head.size(), lit.size() - head.size() - tail.size());
      if (!contains(text, "<|im_start|>") && !contains(text, "<|im_end|>")) return text;
    }
  }
  return {};
}

bool is_llama2(const NormalisedTemplate& nt) {
  return contains(nt.code, "bos_token+'[INST] '+content.strip()+' [/INST]'") &&
         contains(nt.code, "' '+content.strip()+' '+eos_token") &&
         contains(nt.code, "'<<SYS>>\n'+system_message+'\n<</SYS>>\n\n'+message.content") &&
         !contains(nt.code, "default_system") &&
         !contains(nt.code, "DEFAULT_SYSTEM") && !nt.found_raw_text;
}

/// Meta-Llama-3-Instruct: per message bos (first only) + "<|start_header_id|>ROLE<|end_header_id|>\n\n" +
/// trimmed content + "<|eot_id|>"; the assistant header as generation prompt. Llama 3.1+ templates (tools,
/// "Cutting Knowledge Date" system text) are other forms and are not matched.
bool is_llama3(const NormalisedTemplate& nt) {
  return contains(nt.code, "'<|start_header_id|>'+message.role+'<|end_header_id|>\n\n'+message.content|trim+'<|eot_id|>'") &&
         contains(nt.code, "{%ifloop.index0==0%}{%setcontent=bos_token+content%}{%endif%}") &&
         contains(nt.code, "'<|start_header_id|>assistant<|end_header_id|>\n\n'") && !contains(nt.code, "tools") &&
         !contains(nt.code, "Knowledge") && !nt.found_raw_text;
}

/// True when the Llama-3 template adds the assistant header only with add_generation_prompt (the original
/// 8B-Instruct template adds it always).
bool llama3_conditional_header(const NormalisedTemplate& nt) {
  return contains(nt.code, "{%ifadd_generation_prompt%}{{'<|start_header_id|>assistant<|end_header_id|>\n\n'}}{%endif%}");
}

/// Length in bytes of the UTF-8 sequence starting with byte b (1 for invalid lead bytes).
size_t utf8_len(unsigned char b) {
  if (b >= 0xF0 && b < 0xF8) return 4;
  if (b >= 0xE0) return 3;
  if (b >= 0xC0) return 2;
  return 1;
}

uint32_t utf8_decode(const std::string& s, size_t pos, size_t len) {
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[pos + k])); };
  if (len == 1) return b(0);
  if (len == 2) return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
  if (len == 3) return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
  return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
}

/// Python's str.isspace() (what Jinja's str.strip() removes).
bool is_python_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

/// Python str.strip() on UTF-8 text.
std::string python_strip(const std::string& s) {
  std::vector<std::pair<size_t, bool>> starts;  // (byte offset, is space) per code point
  for (size_t pos = 0; pos < s.size();) {
    size_t len = utf8_len(static_cast<unsigned char>(s[pos]));
    if (pos + len > s.size()) len = 1;
    starts.emplace_back(pos, is_python_space(utf8_decode(s, pos, len)));
    pos += len;
  }
  size_t first = 0, last = starts.size();
  while (first < last && starts[first].second) ++first;
  while (last > first && starts[last - 1].second) --last;
  if (first == last) return {};
  const size_t begin = starts[first].first;
  const size_t end = last < starts.size() ? starts[last].first : s.size();
  return s.substr(begin, end - begin);
}

std::string render_chatml(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                          bool add_generation_prompt) {
  std::string out = tmpl.bos_token;  // empty unless the template starts with {{ bos_token }}
  if (!tmpl.default_system.empty() && messages.front().role != "system")
    out += "<|im_start|>system\n" + tmpl.default_system + "<|im_end|>\n";
  for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string render_llama3(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                          bool add_generation_prompt) {
  std::string out = tmpl.bos_token;
  for (const ChatMessage& m : messages)
    out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + python_strip(m.content) + "<|eot_id|>";
  if (add_generation_prompt || !tmpl.generation_prompt_optional) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::string render_llama2(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages) {
  size_t first = 0;
  std::string system_message;
  const bool has_system = messages.front().role == "system";
  if (has_system) {
    system_message = messages.front().content;
    first = 1;
  }
  std::string out;
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const size_t index0 = i - first;
    if ((m.role == "user") != (index0 % 2 == 0))
      throw Error("chat template (Llama-2): conversation roles must alternate user/assistant/user/... (message " +
                      std::to_string(i) + " has role '" + m.role + "')",
                  "start with an optional system message, then alternate user and assistant messages");
    std::string content = m.content;
    if (index0 == 0 && has_system) content = "<<SYS>>\n" + system_message + "\n<</SYS>>\n\n" + m.content;
    if (m.role == "user")
      out += tmpl.bos_token + "[INST] " + python_strip(content) + " [/INST]";
    else if (m.role == "assistant")
      out += " " + python_strip(content) + " " + tmpl.eos_token;
  }
  return out;
}

/// tokenizer_config.json token field: a string, an AddedToken object {"content": ...}, or null/absent.
std::string token_string(const nlohmann::json& config, const char* key) {
  if (!config.contains(key)) return {};
  const nlohmann::json& v = config.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v.at("content").is_string()) return v.at("content").get<std::string>();
  return {};
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

ChatTemplate parse_chat_template(const std::string& template_text, const std::string& bos_token,
                                 const std::string& eos_token, const std::string& source) {
  const NormalisedTemplate nt = normalise_template(template_text, source);
  ChatTemplate tmpl;
  if (is_chatml(nt)) {
    tmpl.kind = ChatTemplateKind::ChatML;
    tmpl.default_system = chatml_default_system(nt);
    if (chatml_bos_prefix(nt)) {
      if (bos_token.empty())
        throw Error(source + ": the ChatML chat template starts with bos_token, which is missing",
                    "add \"bos_token\": \"<s>\" to tokenizer_config.json");
      tmpl.bos_token = bos_token;
    }
    return tmpl;
  }
  if (is_llama2(nt)) {
    if (bos_token.empty() || eos_token.empty())
      throw Error(source + ": Llama-2 chat template needs bos_token and eos_token, which are missing",
                  "add \"bos_token\": \"<s>\" and \"eos_token\": \"</s>\" to tokenizer_config.json");
    tmpl.kind = ChatTemplateKind::Llama2;
    tmpl.bos_token = bos_token;
    tmpl.eos_token = eos_token;
    return tmpl;
  }
  if (is_llama3(nt)) {
    if (bos_token.empty())
      throw Error(source + ": Llama-3 chat template needs bos_token, which is missing",
                  "add \"bos_token\": \"<|begin_of_text|>\" to tokenizer_config.json");
    tmpl.kind = ChatTemplateKind::Llama3;
    tmpl.bos_token = bos_token;
    tmpl.generation_prompt_optional = llama3_conditional_header(nt);
    return tmpl;
  }
  throw Error(source + ": chat template is not a form tprun can render (supported: ChatML, Llama-2 [INST], Llama-3)",
              kPlainPromptHint);
}

ChatTemplate load_chat_template(const std::string& model_dir) {
  const std::string config_path = model_dir + "/tokenizer_config.json";
  const std::string jinja_path = model_dir + "/chat_template.jinja";
  nlohmann::json config = nlohmann::json::object();
  const std::string config_text = read_file(config_path);
  if (!config_text.empty()) {
    try {
      config = nlohmann::json::parse(config_text, json_depth_guard(config_path));
    } catch (const nlohmann::json::exception& e) {
      throw Error(config_path + ": not valid JSON (" + json_error_text(e) + ")", "restore the file from the source checkpoint");
    }
    if (!config.is_object()) throw Error(config_path + ": expected a JSON object", "restore the file from the source checkpoint");
  }
  std::string source = jinja_path;
  std::string text = read_file(jinja_path);
  if (text.empty()) {
    source = config_path;
    if (config_text.empty())
      throw Error(config_path + ": missing or empty, so the model has no chat template",
                  "copy tokenizer_config.json from the Hugging Face checkpoint into the model dir, or pass a plain "
                  "--prompt instead");
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
                  "use `tprun MODEL generate --prompt ...` (plain text completion) instead of chat");
  }
  return parse_chat_template(text, token_string(config, "bos_token"), token_string(config, "eos_token"), source);
}

std::string render_chat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt) {
  if (messages.empty())
    throw Error("chat template: cannot render an empty conversation", "give at least one message");
  if (tmpl.kind == ChatTemplateKind::Llama2) return render_llama2(tmpl, messages);
  if (tmpl.kind == ChatTemplateKind::Llama3) return render_llama3(tmpl, messages, add_generation_prompt);
  return render_chatml(tmpl, messages, add_generation_prompt);
}

std::string apply_chat_template(const std::string& model_dir, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) {
  return render_chat(load_chat_template(model_dir), messages, add_generation_prompt);
}

}  // namespace tpshard
