#!/usr/bin/env python3
"""make_cases.py: regenerate tests/chat/template_cases.json, the non-SmolLM2 chat-template references.

Each template is rendered with transformers' own Jinja setup (the one apply_chat_template uses), so the
expected strings are exactly what Hugging Face produces. SmolLM2's cases come from
tests/fixtures/smollm2/make_reference.py (they need the model dir); these need only transformers.
Usage: python3 tests/chat/make_cases.py
"""
import json
import os

import transformers
from transformers.utils.chat_template_utils import _compile_jinja_template

HERE = os.path.dirname(os.path.abspath(__file__))

# The Llama-2-chat template as published in meta-llama/Llama-2-7b-chat-hf tokenizer_config.json.
LLAMA2 = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
)

# ChatML after one BOS, as published in internlm/internlm2-chat-7b tokenizer_config.json.
CHATML_WITH_BOS = ("{{ bos_token }}{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                   "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
                   "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

# Plain ChatML with no default system prompt, written with {%- -%} trimming and double quotes.
CHATML_PLAIN = (
    "{%- for message in messages %}\n"
    "    {{- \"<|im_start|>\" + message[\"role\"] + \"\\n\" + message[\"content\"] + \"<|im_end|>\" + \"\\n\" }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- \"<|im_start|>assistant\\n\" }}\n"
    "{%- endif %}\n"
)

# Meta-Llama-3-Instruct with the generation prompt conditional (later revisions), and as first published
# in meta-llama/Meta-Llama-3-8B-Instruct tokenizer_config.json (the assistant header always).
LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
          "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
          "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
          "{{ content }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")

LLAMA3_ORIGINAL = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
                   "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
                   "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
                   "{{ content }}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}")

TEMPLATES = {
    "llama2": {"template": LLAMA2, "bos_token": "<s>", "eos_token": "</s>"},
    "llama3": {"template": LLAMA3, "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "llama3_original": {"template": LLAMA3_ORIGINAL, "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "chatml_plain": {"template": CHATML_PLAIN, "bos_token": "", "eos_token": ""},
    "chatml_with_bos": {"template": CHATML_WITH_BOS, "bos_token": "<s>", "eos_token": "</s>"},
}
CHATML_WITH_EOS = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                   "'<|im_end|>' + eos_token + '\\n'}}{% endfor %}"
                   "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
# Forms we do not render: the C++ side must refuse them with an Error. Llama 3.1 adds a dated system
# preamble and tool calls to the Llama-3 form (shortened here to what makes it different).
LLAMA31 = ("{{- bos_token }}{%- if not date_string is defined %}{%- set date_string = \"26 Jul 2024\" %}{%- endif %}"
           "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}{{- 'Cutting Knowledge Date: December 2023\\n' }}"
           "{{- '<|eot_id|>' }}" + LLAMA3)
UNSUPPORTED = {"llama31": LLAMA31, "chatml_with_eos": CHATML_WITH_EOS}

CONVERSATIONS = [
    ("user_only", [{"role": "user", "content": "What is the capital of France?"}]),
    ("with_system", [{"role": "system", "content": "You are terse."},
                     {"role": "user", "content": "  Name three primary colors.\n"}]),
    ("multi_turn", [{"role": "system", "content": "Be kind."},
                    {"role": "user", "content": "Hi!"},
                    {"role": "assistant", "content": " Hello! How can I help? "},
                    {"role": "user", "content": "Tell me a joke.\nMake it short."}]),
    ("unicode_spaces", [{"role": "user", "content": "\u00a0\u3000Café ½\u2003"}]),
    ("not_alternating", [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]),
]


def main():
    cases = []
    for tname, t in TEMPLATES.items():
        compiled = _compile_jinja_template(t["template"])
        for cname, messages in CONVERSATIONS:
            for gen in (True, False):
                case = {"template": tname, "name": cname, "add_generation_prompt": gen, "messages": messages}
                try:
                    case["rendered"] = compiled.render(messages=messages, add_generation_prompt=gen,
                                                       bos_token=t["bos_token"], eos_token=t["eos_token"])
                except Exception as e:  # the template's raise_exception
                    case["error"] = str(e)
                cases.append(case)
    out = {"generated_by": f"tests/chat/make_cases.py (transformers {transformers.__version__} Jinja environment)",
           "templates": TEMPLATES, "unsupported": UNSUPPORTED, "cases": cases}
    with open(os.path.join(HERE, "template_cases.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
