#!/usr/bin/env python3
"""make_cases.py: regenerate tests/chat/template_cases.json, the expected renderings of the chat templates.

Every case is rendered with Python jinja2 set up exactly as transformers' apply_chat_template sets it up
(transformers/utils/chat_template_utils.py): an ImmutableSandboxedEnvironment with trim_blocks=True,
lstrip_blocks=True and the loopcontrols extension, transformers' tojson filter (json.dumps with
ensure_ascii=False) and its raise_exception / strftime_now globals; render(messages=..., tools=None,
documents=None, add_generation_prompt=..., **special_tokens). The templates are the model files in
tests/fixtures/chat_templates/ (sources and licences in SOURCES.md there), plus small feature templates
that pin down the Jinja semantics the interpreter must share. CI needs no Python: the output is committed.
Usage: python3 tests/chat/make_cases.py    (needs python3-jinja2 >= 3.1)
"""
import datetime
import json
import os

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures", "chat_templates")


class GenerationTag(jinja2.ext.Extension):
    """transformers' AssistantTracker without mask tracking: {% generation %}BODY{% endgeneration %} renders BODY."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def environment():
    """The jinja2 environment of transformers' _compile_jinja_template."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


# Special tokens each model's tokenizer_config.json defines (the strings apply_chat_template passes).
TEMPLATES = {
    "smollm2": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>",
                "unk_token": "<|endoftext|>"},
    "llama2": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"},
    "mistral-v0.2": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "mistral-v1-system": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "qwen2.5": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "tinyllama": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "</s>"},
    "internlm2": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "phi3.5": {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>", "pad_token": "<|endoftext|>"},
    "gemma2": {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"},
    "deepseek-coder": {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<|EOT|>"},
    "deepseek-r1-distill-qwen": {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"},
}

U = "Café ½ — 日本語 «guillemets» \"double\" 'single' back\\slash\nnew line\n\ttab {{ not jinja }} {% raw %}"
CONVERSATIONS = [
    ("user_only", [{"role": "user", "content": "What is the capital of France?"}]),
    ("with_system", [{"role": "system", "content": "You are terse."},
                     {"role": "user", "content": "Name three primary colors."}]),
    ("multi_turn", [{"role": "system", "content": "Be kind."},
                    {"role": "user", "content": "Hi!"},
                    {"role": "assistant", "content": "Hello! How can I help?"},
                    {"role": "user", "content": "Tell me a joke.\nMake it short."}]),
    ("multi_turn_no_system", [{"role": "user", "content": "2+2?"},
                              {"role": "assistant", "content": "4"},
                              {"role": "user", "content": "And 3+3?"}]),
    ("ends_with_assistant", [{"role": "user", "content": "Say hi."},
                             {"role": "assistant", "content": "Hi."}]),
    ("unicode_quotes_newlines", [{"role": "system", "content": U},
                                 {"role": "user", "content": U + " 🙂"},
                                 {"role": "assistant", "content": "«ok» \"fine\"\n\n'yes' 😀"},
                                 {"role": "user", "content": "\\n is not a newline; \u00a0nbsp"}]),
    ("padded_whitespace", [{"role": "user", "content": "  \n  padded  \t\n"},
                           {"role": "assistant", "content": " \u3000 answer \u2003"},
                           {"role": "user", "content": "\u00a0next\u00a0"}]),
    ("think_tags", [{"role": "user", "content": "Why?"},
                    {"role": "assistant", "content": "<think>\nreasoning\n</think>\n\nBecause."},
                    {"role": "user", "content": "Sure?"}]),
    ("system_only", [{"role": "system", "content": "Only a system prompt."}]),
    ("empty_content", [{"role": "system", "content": ""}, {"role": "user", "content": ""}]),
    ("not_alternating", [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]),
    ("unknown_role", [{"role": "user", "content": "a"}, {"role": "tool", "content": "{\"r\": 1}"},
                      {"role": "user", "content": "b"}]),
]

# Small templates that pin down Jinja semantics (rendered with the variables below, no special tokens).
FEATURE_VARS = {"messages": [{"role": "user", "content": " hi "}, {"role": "assistant", "content": "yo"}],
                "x": {"role": "user", "content": " hi ", "n": 3, "f": 2.5, "l": [1, "é\n\"", None, True, 2.5]},
                "add_generation_prompt": True, "bos_token": "<s>", "tools": None, "documents": None}
FEATURES = [
    "{% set x = 0 %}{% for i in [1,2] %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}",
    "{{ [1,'a',none,true,1.5,{'k':'v'}] }}",
    "{{ u }}|{{ u|length }}|{{ u == u }}|{{ u is defined }}|{{ u|default('d') }}",
    "{{ u.x }}",
    "{{ u + 1 }}",
    "{{ 1e20 }} {{ 1.0e-5 }} {{ 0.1+0.2 }} {{ 3/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7%3 }} {{ 0.0001 }} {{ 1e16 }} "
    "{{ 123.456 }} {{ 2**10 }} {{ 2**-1 }} {{ 1_000 }} {{ -0.0 }}",
    "{{ 10 // 3 }} {{ -10 % 3 }} {{ 10.5 // 2 }} {{ -10.5 % 3 }} {{ 4 / 2 }} {{ 1 + 1.5 }} {{ true + 1 }}",
    "{{ 1 / 0 }}",
    "{{ 'a' ~ 1 ~ none ~ true ~ u }}",
    "{{ 'abc'[::-1] }}{{ 'abc'[5:] }}{{ [1,2,3,4][1:3] }}{{ [1,2,3,4][-2:] }}{{ 'héllo'[1] }}{{ [1,2,3][::-2] }}"
    "{{ 'abcdef'[-100:100:2] }}{{ messages[-1].role }}{{ messages[5] is defined }}",
    "  {% if true %}\n  x\n  {% endif %}\n  y",
    "a\n  {% for i in [1] %}\n    {{ i }}\n  {% endfor %}\nb\n",
    "{#- comment -#}\n  {# c2 #}\nx {{ 1 }}\n  {%- if true -%}\n  y\n  {% endif %}\nz",
    "   {%+ if true %}p{% endif %}\n{% if true +%}\nq{% endif %}",
    "line\r\nwindows\rmac\n{% if true %}\r\nafter{% endif %}\n\n",
    "{{ 'ab\"c\\'d' }} {{ ['ab\"c\\'d', 'x\\ny', \"it's\", '\\t\\x01'] }} {{ ('a',) }} {{ () }}",
    "{{ 'x' if false }}|{{ 1 if true else 2 }}|{{ 'a' if u is defined else 'b' }}",
    "{{ x.role }}{{ x['content'] }}{{ x.nope }}|{{ x.get('role') }}{{ x.get('zz', 5) }}{{ x.get('zz') }}",
    "{{ [1,2] + [3] }}{{ 'a' * 3 }}{{ 3 * 'b' }}{{ [0] * 2 }}{{ (1,2) }}",
    "{{ 1 < 'a' }}",
    "{% for a in [3,4,5] if a > 3 %}{{ loop.index }}/{{ loop.length }}{{ loop.first }}{{ loop.last }}"
    "{{ loop.revindex0 }}{% else %}none{% endfor %}{% for a in [] %}x{% else %}empty{% endfor %}",
    "{{ 'A b-c(d' | title }} {{ 'hELLo WOrld'|capitalize }} {{ 'hello wORLD 2nd'.title() }} {{ 'ÉCOLE'|lower }}",
    "{{ x|tojson }}{{ x.l|tojson(indent=2) }}{{ {}|tojson }}{{ []|tojson(indent=4) }}{{ {'b':1,'a':2}|tojson(sort_keys=true) }}"
    "{{ 'é\"\\n\\u2028'|tojson }}{{ [1.0, 1e100, -3]|tojson }}",
    "{{ 'x' is string }}{{ 1 is number }}{{ none is none }}{{ x is mapping }}{{ true is boolean }}{{ 1 is integer }}"
    "{{ 1.5 is float }}{{ 3 is divisibleby 3 }}{{ 3 is odd }}{{ x.l is sequence }}{{ 'a' is lower }}{{ x is iterable }}"
    "{{ true is sameas true }}{{ 'a' is in 'abc' }}{{ 1 is eq 1.0 }}",
    "{%- for m in messages -%}\n  {{- m.role }}:{{ m.content | trim }}\n{%- endfor %}\nend",
    "{% set ns = namespace(a=1, s='') %}{% for i in range(3) %}{% set ns.a = ns.a * 2 %}{% set ns.s = ns.s ~ i %}"
    "{% endfor %}{{ ns.a }}{{ ns.s }}",
    "{% macro f(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(2, b=3) }}{{ f() }}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}"
    "{% endfor %}{{ range(2, 10, 3)|list }}{{ range(5, 0, -2)|list }}",
    "{{ ' a b  c '.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a,b,c'.split(',', 1) }}{{ 'a b c'.rsplit(' ', 1) }}"
    "{{ '  x  '.strip() }}{{ 'xxaxx'.strip('x') }}{{ 'xxaxx'.lstrip('x') }}{{ 'abc'.startswith('ab') }}"
    "{{ 'abc'.endswith(('x','c')) }}{{ 'a<b>c'.split('>')[-1] }}{{ 'abc'.upper() }}{{ 'abcabc'.find('c') }}"
    "{{ 'abcabc'.count('bc') }}{{ '-'.join(['a','b']) }}",
    "{{ 'hello'|replace('l', 'L') }}{{ 'hello'.replace('l','L',1) }}{{ ''|default('e', true) }}{{ [1,2,3]|join('-') }}"
    "{{ [1,2]|first }}{{ [1,2]|last }}{{ 'ab'|list }}{{ {'a':1}|items|list }}{{ 'abc'|reverse }}{{ [1,2]|reverse|list }}"
    "{{ '3'|int + 1 }}{{ 'x'|int }}{{ 2.7|int }}{{ '2.5'|float }}{{ -3|abs }}{{ 42|string ~ '!' }}{{ [3,1,2]|sort }}"
    "{{ ['b','A','c']|sort }}{{ [1,2,3]|sum }}{{ [1,2,1]|unique|list }}{{ [4,2,8]|min }}{{ [4,2,8]|max }}",
    "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}{% for k in {'a': 1} %}{{ k }}{% endfor %}"
    "{{ x.keys()|list }}{{ x|length }}",
    "{{ messages|selectattr('role', 'equalto', 'user')|list|length }}{{ messages|rejectattr('role', 'eq', 'user')|list }}"
    "{{ messages|map(attribute='role')|join(',') }}{{ [1, 0, 2]|select|list }}{{ [1, 2, 3]|reject('odd')|list }}"
    "{{ ['a', 'b']|map('upper')|list }}{{ messages|selectattr('nope', 'defined')|list }}",
    "{{ 'a' in 'abc' }}{{ 1 in [1,2] }}{{ 'role' in x }}{{ 'z' not in x }}{{ 'a' in u }}{{ 1 == 1.0 }}{{ 'a' != 'a' }}"
    "{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ [1, 2] < [1, 3] }}{{ 'b' >= 'a' }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c %}inner {{ a }}{% endset %}[{{ c }}]{% set (d, e) = 'xy' %}{{ e }}",
    "{{ 'x\\ny\\n\\nz'|indent(2) }}|{{ 'x\\ny'|indent(2, true) }}|{{ 'x\\n\\ny'|indent(2, blank=true) }}",
    "{% if not add_generation_prompt is defined %}A{% endif %}{% if u is not defined %}B{% endif %}{{ not 0 }}"
    "{{ 0 or 'alt' }}{{ 1 and 'both' }}{{ none or [] }}{{ tools is none }}{{ documents }}",
    "{{ [] if true }}{{ {'a': [1, 2, (3, 4)], 'b': none, 1: 2.0} }}{{ x.items() | list }}",
    "{% for m in messages %}{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.revindex }}|"
    "{{ loop.cycle('odd', 'even') }};{% endfor %}",
    "{{ raise_exception('boom: ' ~ messages[0].role) }}",
    "{{ messages[0]['content'].strip() + '!' }}{{ messages[0].content|trim|length }}{{ x.l[1]|length }}",
    "{% for m in messages %}{% for c in m.role %}{{ loop.index }}{% endfor %}{{ loop.index }}{% endfor %}",
    "{{ x.n * x.f }} {{ x.n // 2 }} {{ -x.n }} {{ x.n ** 2 }} {{ x.f|round }} {{ 3.5|round }} {{ 2.675|round(2) }} "
    "{{ 7|float }} {{ 2.5|round(0, 'ceil') }}",
    "{{ \"adjacent\" 'strings' }}{{ '\\x41\\u00e9\\U0001F600\\101' }}{{ 'unknown \\d escape' }}",
    "{{ x.pop('role') }}",
    "{{ x.__class__ }}",
    "{% generation %}gen {{ 1 }}{% endgeneration %}",
    "{% if messages %}{% for m in messages %}{% if loop.last %}{{ m.content }}{% endif %}{% endfor %}{% elif x %}e{% else %}f"
    "{% endif %}",
]


def render(env, text, **variables):
    try:
        return {"rendered": env.from_string(text).render(**variables)}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}
    except Exception as e:  # TypeError, ZeroDivisionError, ... : also an error for the C++ side
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    env = environment()
    cases = []
    for tname, tokens in TEMPLATES.items():
        with open(os.path.join(FIXTURES, tname + ".jinja"), encoding="utf-8") as f:
            text = f.read()
        for cname, messages in CONVERSATIONS:
            for gen in (True, False):
                case = {"template": tname, "name": cname, "add_generation_prompt": gen, "messages": messages}
                case.update(render(env, text, messages=messages, tools=None, documents=None,
                                   add_generation_prompt=gen, **tokens))
                cases.append(case)
    features = []
    for text in FEATURES:
        features.append({"template": text, **render(env, text, **FEATURE_VARS)})
    out = {"generated_by": f"tests/chat/make_cases.py (Python jinja2 {jinja2.__version__}, transformers' environment)",
           "templates": {name: {"file": name + ".jinja", "special_tokens": tokens} for name, tokens in TEMPLATES.items()},
           "cases": cases, "feature_variables": FEATURE_VARS, "features": features}
    with open(os.path.join(HERE, "template_cases.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    n_err = sum("error" in c for c in cases)
    print(f"{len(cases)} template cases ({n_err} raise), {len(features)} feature cases")


if __name__ == "__main__":
    main()
