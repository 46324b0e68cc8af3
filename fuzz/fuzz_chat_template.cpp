// fuzz_chat_template.cpp: the chat template a model directory (or --chat-template FILE) brings: arbitrary
// template text parsed and rendered by runtime/jinja with a fixed conversation, with and without the
// generation prompt, under small limits. An Error is a correct answer; a crash, a hang or unbounded memory
// is a finding.
#include <cstdint>
#include <string>
#include <vector>

#include "format/error.h"
#include "runtime/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tpshard;
  static const std::vector<ChatMessage> messages = {
      {"system", "You are terse."},
      {"user", "Café ½ \"quoted\" 'single'\nnew line {{ x }}"},
      {"assistant", "<think>\nhm\n</think>\n\n  Paris.  "},
      {"user", "And Spain?"}};
  jinja::Limits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_loop_iterations = 100000;
  limits.max_depth = 64;
  limits.max_work_bytes = 16 << 20;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const ChatTemplate t = parse_chat_template(
        text, {{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"unk_token", "<unk>"}}, "fuzz.jinja", limits);
    for (const bool gen : {true, false}) {
      try {
        (void)render_chat(t, messages, gen);
      } catch (const Error&) {
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
