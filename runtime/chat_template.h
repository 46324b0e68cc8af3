// chat_template.h: chat messages -> the prompt string a chat model was trained on.
// Owns: finding a model's Jinja chat template (chat_template.jinja, or tokenizer_config.json "chat_template",
// or a file given with --chat-template), its special tokens (tokenizer_config.json bos_token, eos_token, ...),
// and rendering it as transformers' apply_chat_template(tokenize=False) does: jinja2's ImmutableSandboxedEnvironment
// with trim_blocks, lstrip_blocks and loopcontrols; variables messages, add_generation_prompt, tools=None,
// documents=None and the special tokens; raise_exception and strftime_now. The interpreter is runtime/jinja/.
// Does not own: tokenization.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/jinja/interpreter.h"

namespace tpshard {

/// One chat turn. role is usually "system", "user" or "assistant"; the template decides what it accepts.
struct ChatMessage {
  std::string role, content;
};

/// A parsed chat template with the special-token strings it is rendered with.
struct ChatTemplate {
  std::string source;  ///< the file the template came from, named in errors
  std::shared_ptr<const jinja::Template> program;
  /// tokenizer_config.json special tokens by name (bos_token, eos_token, unk_token, pad_token, sep_token,
  /// cls_token, mask_token); absent or null ones are left out (undefined in the template, as in transformers).
  std::map<std::string, std::string> special_tokens;
};

/// Parse a Jinja chat template's text. source names the file in error messages. Throws Error naming
/// source, line and construct for a syntax error or a construct outside the supported subset (hint: write
/// the template without it and pass it with --chat-template FILE).
/// limits bound every render of it (runtime/jinja/interpreter.h; the defaults fit any real conversation).
ChatTemplate parse_chat_template(const std::string& template_text, std::map<std::string, std::string> special_tokens,
                                 const std::string& source, const jinja::Limits& limits = {});
/// Same, with only bos_token and eos_token (empty = absent).
ChatTemplate parse_chat_template(const std::string& template_text, const std::string& bos_token,
                                 const std::string& eos_token, const std::string& source);

/// Plain ChatML ("<|im_start|>{role}\n{content}<|im_end|>\n" per message, "<|im_start|>assistant\n" as the
/// generation prompt), for tests and tools that need a template without a model.
ChatTemplate chatml_template();

/// The model's template: MODEL_DIR/chat_template.jinja if present, else tokenizer_config.json
/// "chat_template" (a string, or a list of {name, template} where "default" is used); special tokens from
/// tokenizer_config.json. Throws Error naming the file when it is missing, is not JSON, has no chat template,
/// or the template cannot be parsed.
ChatTemplate load_chat_template(const std::string& model_dir);

/// --chat-template FILE: the Jinja template in template_file (the whole file is the template), with the
/// special tokens of MODEL_DIR/tokenizer_config.json when that file exists. Throws Error naming the file.
ChatTemplate load_chat_template_file(const std::string& template_file, const std::string& model_dir);

/// load_chat_template_file when template_file is non-empty, else load_chat_template(model_dir).
ChatTemplate load_chat_template(const std::string& model_dir, const std::string& template_file);

/// Render messages with a template. add_generation_prompt is the template's variable of that name (most
/// templates then end with the assistant header). Throws Error for an empty message list, and (naming the
/// template file) when the template fails or calls raise_exception (the message is the template's own).
std::string render_chat(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt);

/// load_chat_template(model_dir) then render_chat(...): the C++ equivalent of
/// tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=...) in transformers.
/// The result still has to be tokenized (with add_special_tokens=false: BOS, if any, is already in it).
std::string apply_chat_template(const std::string& model_dir, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt);

}  // namespace tpshard
