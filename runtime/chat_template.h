// chat_template.h: chat messages -> the prompt string a chat model was trained on.
// Owns: reading the Jinja chat template of a model dir (tokenizer_config.json "chat_template" or
// chat_template.jinja), recognising the forms we support (ChatML, Llama-2 [INST], Llama-3) and rendering them
// exactly as transformers' apply_chat_template(tokenize=False) does. Does not own: tokenization.
// Why not a Jinja engine: Debian packages no C++ Jinja2 library; a template we do not recognise is an Error.
#pragma once
#include <string>
#include <vector>

namespace tpshard {

/// One chat turn. role is "system", "user" or "assistant" (ChatML passes any role through verbatim).
struct ChatMessage {
  std::string role, content;
};

/// The template forms we can render.
enum class ChatTemplateKind {
  ChatML,  ///< "<|im_start|>{role}\n{content}<|im_end|>\n" per message; SmolLM2, Qwen2; InternLM2 with BOS first
  Llama2,  ///< "<s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s>"; Llama-2-chat
  /// "<|begin_of_text|>" + per message "<|start_header_id|>{role}<|end_header_id|>\n\n{content, trimmed}<|eot_id|>";
  /// Meta-Llama-3-Instruct
  Llama3,
};

/// A recognised chat template, with the special-token strings it uses.
struct ChatTemplate {
  ChatTemplateKind kind = ChatTemplateKind::ChatML;
  /// ChatML only: system prompt the template injects when messages[0] is not a system message
  /// (SmolLM2: "You are a helpful AI assistant named SmolLM, trained by Hugging Face"); empty when none.
  std::string default_system;
  /// Llama2: tokenizer_config.json bos_token (e.g. "<s>"); ChatML: the same when the template starts with
  /// {{ bos_token }} (InternLM2), rendered once before the first message; empty otherwise.
  std::string bos_token;
  std::string eos_token;  ///< Llama2 only: tokenizer_config.json eos_token (e.g. "</s>")
  /// Llama3 only: the assistant header is added only with add_generation_prompt (false: always, as the
  /// original Meta-Llama-3-8B-Instruct template does).
  bool generation_prompt_optional = true;
};

/// Recognise a Jinja chat template's text. source names the file in error messages.
/// Throws Error naming source when the template is neither ChatML nor Llama-2 [INST] (hint: pass a plain
/// --prompt), or when a Llama-2 template has no bos_token/eos_token.
ChatTemplate parse_chat_template(const std::string& template_text, const std::string& bos_token,
                                 const std::string& eos_token, const std::string& source);

/// Read MODEL_DIR/chat_template.jinja if present, else tokenizer_config.json "chat_template" (a string, or
/// a list of {name, template} where the "default" entry is used), plus its bos_token / eos_token.
/// Throws Error naming the file when it is missing, is not JSON, has no chat template, or the template
/// is not recognised.
ChatTemplate load_chat_template(const std::string& model_dir);

/// Render messages with a recognised template. add_generation_prompt appends the assistant header
/// (ChatML: "<|im_start|>assistant\n"; Llama-2 has none: the prompt already ends with " [/INST]").
/// Throws Error for an empty message list, and for Llama-2 when roles do not alternate user/assistant
/// after an optional leading system message (the template's own raise_exception).
std::string render_chat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt);

/// load_chat_template(model_dir) then render_chat(...): the C++ equivalent of
/// tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=...) in transformers.
/// The result still has to be tokenized (with add_special_tokens=false: BOS, if any, is already in it).
std::string apply_chat_template(const std::string& model_dir, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt);

}  // namespace tpshard
