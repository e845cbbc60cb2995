#!/usr/bin/env python3
"""Golden outputs for kiln's chat template renderer (runtime/text/chat_template.h).

Renders every chat template in the shared assets (chat_templates/*.jinja and the chat_template of
each tokenizer_config.json) over a fixed set of conversations with transformers' own renderer
(transformers.utils.chat_template_utils.render_jinja_template: jinja2's
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loopcontrols, and transformers'
tojson / raise_exception / strftime_now), plus a table of small templates that pin down the
expression language. strftime_now reads a fixed clock (FIXED_NOW) so dates are deterministic.

Run with the kiln venv:
  /opt/kiln-venv/bin/python tools/goldens/make_chat_template_goldens.py [--assets DIR]
Writes tests/data/chat_templates/{render_goldens.json,expression_goldens.json}.
"""

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

import jinja2
import transformers
import transformers.utils.chat_template_utils as ctu

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "data" / "chat_templates"
FIXED_NOW = dt.datetime(2024, 9, 26, 10, 30, 0)


class FixedDatetime(dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


# transformers' strftime_now calls datetime.now() from this module at render time.
ctu.datetime = FixedDatetime

# Special tokens for the standalone .jinja files (their tokenizer_config values on the Hub).
JINJA_SPECIAL_TOKENS = {
    "Qwen-Qwen2.5-7B-Instruct.jinja": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": {
        "bos_token": "<｜begin▁of▁sentence｜>",
        "eos_token": "<｜end▁of▁sentence｜>",
        "pad_token": "<｜end▁of▁sentence｜>",
    },
    "google-gemma-2-2b-it.jinja": {
        "bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"},
    "meta-llama-Llama-3.1-8B-Instruct.jinja": {
        "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "meta-llama-Llama-3.2-3B-Instruct.jinja": {
        "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "microsoft-Phi-3.5-mini-instruct.jinja": {
        "bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>",
        "pad_token": "<|endoftext|>"},
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": {
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
}

SPECIAL_TOKEN_FIELDS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                        "cls_token", "mask_token"]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


CONVERSATIONS = {
    "user_only": {"messages": [user("Hello!")]},
    "system_user": {"messages": [SYSTEM, user("What is 2+2?")]},
    "multi_turn": {"messages": [user("Hi there"), assistant("Hello! How can I help?"),
                                user("Tell me a joke.")]},
    "assistant_last": {"messages": [user("What is the capital of France?"),
                                    assistant("The capital of France is Paris.")]},
    "system_multi_turn": {"messages": [SYSTEM, user("One"), assistant("Two"), user("Three"),
                                       assistant("Four")]},
    "unicode": {"messages": [user("Привет! 你好，世界 🌍 — café naïve"), assistant("こんにちは 👋"),
                             user("Ελληνικά ✓ and emoji 🧪🔥")]},
    "whitespace": {"messages": [user("  \n  Leading and trailing whitespace \t\n"),
                                assistant("\n answer with spaces  "),
                                user("\u3000ideographic space\u3000 ")]},
    "special_chars": {"messages": [user(
        "Quotes \"double\" and 'single', backslash \\ and {{ braces }} {% tag %} <b>&amp;</b> "
        "json {\"a\": [1, 2]}\ttab")]},
    "bad_alternation": {"messages": [user("first"), user("second")]},
    "system_only_then_assistant": {"messages": [SYSTEM, assistant("I speak first.")]},
    "think": {"messages": [user("What is 2+2?"),
                           assistant("<think>\nSimple arithmetic.\n</think>\n\nThe answer is 4."),
                           user("And 3+3?")]},
    "date_string": {"messages": [SYSTEM, user("What day is it?")],
                    "extra": {"date_string": "01 Jan 2025"}},
    "tools_user": {"messages": [SYSTEM, user("What's the weather in Paris?")],
                   "extra": {"tools": [WEATHER_TOOL]}},
    "tools_roundtrip": {
        "messages": [
            user("What's the weather in Paris?"),
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call12345", "type": "function",
                "function": {"name": "get_weather",
                             "arguments": {"location": "Paris", "unit": "celsius"}}}]},
            {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
             "content": "{\"temperature\": 22, \"unit\": \"celsius\"}"},
            assistant("It is 22°C in Paris."),
        ],
        "extra": {"tools": [WEATHER_TOOL]},
    },
    "reasoning_field": {"messages": [user("Hi"), {"role": "assistant", "content": "Hello.",
                                                  "reasoning_content": "Greet back."},
                                     user("Bye")]},
}


def versions():
    return {"transformers": transformers.__version__, "jinja2": jinja2.__version__,
            "python": sys.version.split()[0]}


def describe_error(error):
    # raise_exception raises a plain TemplateError; UndefinedError etc. are subclasses.
    kind = "raise" if type(error) is jinja2.exceptions.TemplateError else "error"
    return {"kind": kind, "type": type(error).__name__, "message": str(error)}


def render_chat(source, conversation, add_generation_prompt, special_tokens):
    """transformers' apply_chat_template(tokenize=False) minus the tokenizer."""
    messages = [{k: v for k, v in m.items() if v is not None} for m in conversation["messages"]]
    extra = dict(conversation.get("extra", {}))
    tools = extra.pop("tools", None)
    kwargs = {**special_tokens, **extra}
    rendered, _ = ctu.render_jinja_template(
        conversations=[messages], tools=tools, chat_template=source,
        add_generation_prompt=add_generation_prompt, **kwargs)
    return rendered[0]


def special_tokens_from_config(config):
    tokens = {}
    for field in SPECIAL_TOKEN_FIELDS:
        value = config.get(field)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            tokens[field] = value
    return tokens


def template_sources(assets):
    sources = []
    for path in sorted((assets / "chat_templates").glob("*.jinja")):
        sources.append((f"chat_templates/{path.name}", path.read_text(encoding="utf-8"),
                        JINJA_SPECIAL_TOKENS[path.name]))
    configs = sorted((assets / "tokenizers").glob("*/tokenizer_config*.json"))
    configs += sorted((assets / "models").glob("*/tokenizer_config.json"))
    for path in configs:
        config = json.loads(path.read_text(encoding="utf-8"))
        template = config.get("chat_template")
        if isinstance(template, list):
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        if not isinstance(template, str):
            continue
        sources.append((str(path.relative_to(assets)), template,
                        special_tokens_from_config(config)))
    return sources


def make_render_goldens(assets):
    cases = []
    templates = []
    for template_id, source, special_tokens in template_sources(assets):
        templates.append({"id": template_id, "special_tokens": special_tokens})
        for name, conversation in CONVERSATIONS.items():
            for agp in (False, True):
                case = {"template": template_id, "conversation": name,
                        "add_generation_prompt": agp}
                try:
                    case["expected"] = render_chat(source, conversation, agp, special_tokens)
                except Exception as error:  # noqa: BLE001 - every template error is a golden
                    case["error"] = describe_error(error)
                cases.append(case)
    return {"versions": versions(), "fixed_now": FIXED_NOW.isoformat(),
            "templates": templates, "conversations": CONVERSATIONS, "cases": cases}


# (template, context): small templates pinning down the expression language and whitespace rules.
EXPRESSIONS = [
    # literals and printing
    ("{{ 1 }}|{{ -3 }}|{{ 1.5 }}|{{ 1e3 }}|{{ 2.0 }}|{{ 1_000 }}", {}),
    ("{{ 0.1 + 0.2 }}|{{ 1e20 }}|{{ 1e16 }}|{{ 1e15 }}|{{ 0.0001 }}|{{ 0.00001 }}|{{ 1/3 }}", {}),
    ("{{ true }}|{{ True }}|{{ false }}|{{ none }}|{{ None }}", {}),
    ("{{ 'a\\nb' }}|{{ \"it's\" }}|{{ 'tab\\there' }}|{{ '\\u00e9\\x41' }}|{{ 'un\\known' }}", {}),
    ("{{ 'adjacent' 'strings' }}", {}),
    ("{{ [1, 'two', none, true, 2.5] }}|{{ (1,) }}|{{ (1, 2) }}|{{ () }}", {}),
    ("{{ {'a': 1, 'b': [1, 2], 'c': {'d': none}} }}", {}),
    ("{{ ['it\\'s', \"q\\\"\", 'back\\\\slash', 'nl\\n'] }}", {}),
    ("{{ x }}", {"x": {"k": "v", "n": 1.0, "t": True, "z": None}}),
    ("{{ missing }}|{{ missing is defined }}|{{ missing is undefined }}", {}),
    # arithmetic
    ("{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 7 / 2 }}|{{ 4 / 2 }}|{{ 2 ** 10 }}", {}),
    ("{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 2 ** 3 ** 2 }}|{{ -2 ** 2 }}|{{ 7.5 // 2 }}", {}),
    ("{{ 'ab' * 3 }}|{{ [1] * 3 }}|{{ 'a' + 'b' }}|{{ [1] + [2] }}|{{ 1 ~ 2 ~ 'x' }}", {}),
    ("{{ true + 1 }}|{{ 1 + 1.5 }}|{{ x ~ '' }}", {"x": None}),
    # comparisons and logic
    ("{{ 1 < 2 }}|{{ 2 <= 1 }}|{{ 'a' < 'b' }}|{{ 1 == 1.0 }}|{{ 1 != 2 }}|{{ 1 < 2 < 3 }}", {}),
    ("{{ 1 and 2 }}|{{ 0 and 2 }}|{{ 0 or 'x' }}|{{ '' or none }}|{{ not 0 }}|{{ not 'a' }}", {}),
    ("{{ 'a' in 'cat' }}|{{ 2 in [1, 2] }}|{{ 'k' in {'k': 1} }}|{{ 'z' not in 'abc' }}", {}),
    ("{{ [1, 2] == [1, 2] }}|{{ {'a': 1} == {'a': 1} }}|{{ (1, 2) == [1, 2] }}", {}),
    ("{{ 'yes' if x else 'no' }}|{{ 'yes' if not x else 'no' }}|[{{ 'only' if x }}]", {"x": 0}),
    ("{{ x == y }}|{{ x is sameas none }}", {"x": {"a": [1, 2]}, "y": {"a": [1, 2]}}),
    # subscripts, attributes, slicing
    ("{{ m.role }}|{{ m['content'] }}|{{ m.missing }}|{{ m.missing is defined }}",
     {"m": {"role": "user", "content": "hi"}}),
    ("{{ xs[0] }}|{{ xs[-1] }}|{{ xs[10] }}|{{ xs.1 }}|{{ xs[1:] }}|{{ xs[:-1] }}|{{ xs[::-1] }}",
     {"xs": [1, 2, 3]}),
    ("{{ s[0] }}|{{ s[-1] }}|{{ s[1:3] }}|{{ s[::2] }}|{{ s[::-1] }}|{{ s[-2:] }}|{{ s[5:1] }}",
     {"s": "héllo wörld"}),
    ("{{ d.items() | list | length }}", {"d": {"items": "the method wins for attributes"}}),
    ("{{ d['items'] }}", {"d": {"items": "item wins for subscripts"}}),
    ("{{ n.attr }}|{{ n.attr is defined }}", {"n": None}),
    ("{{ s.content is defined }}", {"s": "text"}),
    # string methods
    ("{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' x') }}", {"s": "  x hi x  "}),
    ("{{ s.split() }}|{{ s.split(',') }}|{{ s.split(',', 1) }}|{{ s.rsplit(',', 1) }}",
     {"s": "a,b, c d"}),
    ("{{ s.startswith('He') }}|{{ s.endswith('!') }}|{{ s.startswith(('x', 'H')) }}",
     {"s": "Hello!"}),
    ("{{ s.upper() }}|{{ s.lower() }}|{{ s.title() }}|{{ s.capitalize() }}|{{ s.replace('l', 'L') }}",
     {"s": "hello wORLD-foo bar's"}),
    ("{{ s.replace('l', 'L', 1) }}|{{ s.find('l') }}|{{ s.count('l') }}|{{ ', '.join(['a', 'b']) }}",
     {"s": "hello"}),
    ("{{ s.split('</think>')[-1].strip() }}", {"s": "<think>x</think>\n\n answer "}),
    ("{{ s.splitlines() }}|{{ s.isdigit() }}|{{ '123'.isdigit() }}", {"s": "a\nb\r\nc"}),
    # dict methods
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{{ d.keys() | list }}|{{ d.values() | list }}",
     {"d": {"b": 1, "a": 2}}),
    ("{{ d.get('a') }}|{{ d.get('zz') }}|{{ d.get('zz', 'dflt') }}", {"d": {"a": 1}}),
    # filters
    ("{{ s | trim }}|{{ s | upper }}|{{ s | lower }}|{{ s | title }}|{{ s | capitalize }}",
     {"s": "  hello wORLD-foo (bar) \u3000"}),
    ("{{ xs | length }}|{{ s | length }}|{{ d | length }}|{{ xs | count }}",
     {"xs": [1, 2, 3], "s": "héllo", "d": {"a": 1}}),
    ("{{ xs | first }}|{{ xs | last }}|{{ xs | join(', ') }}|{{ xs | join }}|{{ s | first }}",
     {"xs": [1, 2, 3], "s": "abc"}),
    ("{{ s | replace('a', 'b') }}|{{ s | replace('a', 'b', 1) }}", {"s": "banana"}),
    ("{{ missing | default('dflt') }}|{{ '' | default('dflt') }}|{{ '' | default('dflt', true) }}|{{ none | d('x') }}",
     {}),
    ("{{ '42' | int }}|{{ '4.7' | int }}|{{ 'x' | int }}|{{ 3.9 | int }}|{{ '2.5' | float }}|{{ 3 | float }}|{{ 'x' | float(1.5) }}",
     {}),
    ("{{ 3 | string }}|{{ none | string }}|{{ xs | string }}|{{ xs | list }}|{{ 'ab' | list }}",
     {"xs": [1, "a"]}),
    ("{{ d | items | list }}|{% for k, v in d | items %}{{ k }}:{{ v }} {% endfor %}",
     {"d": {"x": 1, "y": [2]}}),
    ("{{ ms | selectattr('role', 'equalto', 'user') | list | length }}|{{ ms | rejectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}",
     {"ms": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
             {"role": "user", "content": "c"}]}),
    ("{{ ms | selectattr('tool_calls') | list | length }}|{{ ms | selectattr('tool_calls', 'defined') | list | length }}",
     {"ms": [{"role": "user"}, {"role": "assistant", "tool_calls": [1]},
             {"role": "assistant", "tool_calls": []}]}),
    ("{{ xs | select('odd') | list }}|{{ xs | reject('even') | list }}|{{ xs | select | list }}",
     {"xs": [0, 1, 2, 3, 4, 5]}),
    ("{{ xs | map('upper') | join('-') }}|{{ ms | map(attribute='n', default='?') | list }}",
     {"xs": ["a", "b"], "ms": [{"n": 1}, {}]}),
    ("{{ xs | unique | list }}|{{ xs | sort }}|{{ xs | sort(reverse=true) }}|{{ ns | sort }}",
     {"xs": ["b", "A", "a", "c", "B"], "ns": [3, 1, 2]}),
    ("{{ ms | sort(attribute='k') | map(attribute='k') | join }}",
     {"ms": [{"k": "b"}, {"k": "a"}, {"k": "c"}]}),
    ("[{{ s | indent }}]|[{{ s | indent(2, true) }}]|[{{ s | indent(2, blank=true) }}]",
     {"s": "line1\n\nline3\n"}),
    ("{{ 2.567 | round }}|{{ 2.567 | round(2) }}|{{ 2.5 | round }}|{{ 3.5 | round }}|{{ 2.1 | round(0, 'ceil') }}",
     {}),
    ("{{ s | safe }}|{{ s | e }}|{{ xs | reverse | list }}|{{ 'abc' | reverse }}|{{ -3 | abs }}|{{ xs | sum }}",
     {"s": "<a href='x'>&</a>", "xs": [1, 2, 3]}),
    ("{{ xs | max }}|{{ xs | min }}", {"xs": [3, 9, 1]}),
    # tojson (transformers' version: ensure_ascii=False, no HTML escaping)
    ("{{ d | tojson }}", {"d": {"b": 1, "a": [1, 2.5, None, True], "s": "é<>&'\"\\\n\t\u0001"}}),
    ("{{ d | tojson(indent=4) }}", {"d": {"name": "f", "params": {"x": [], "y": {}}, "z": [1, 2]}}),
    ("{{ d | tojson(indent=2, sort_keys=true) }}|{{ d | tojson(separators=(',', ':')) }}",
     {"d": {"b": [1, {"c": 2}], "a": "x"}}),
    ("{{ d | tojson(ensure_ascii=true) }}|{{ 'x' | tojson }}|{{ 1.0 | tojson }}|{{ none | tojson }}",
     {"d": {"k": "é😀"}}),
    ("{{ (d | tojson)[:-1] }}", {"d": {"name": "f", "arguments": {"a": 1}}}),
    # tests
    ("{{ x is none }}|{{ x is not none }}|{{ 1 is number }}|{{ true is number }}|{{ 1.5 is float }}|{{ 1 is integer }}",
     {"x": None}),
    ("{{ 's' is string }}|{{ {} is mapping }}|{{ [] is mapping }}|{{ 's' is iterable }}|{{ 1 is iterable }}|{{ [] is sequence }}",
     {}),
    ("{{ true is boolean }}|{{ true is true }}|{{ 0 is false }}|{{ false is false }}|{{ 3 is odd }}|{{ 4 is even }}|{{ 9 is divisibleby 3 }}",
     {}),
    ("{{ 'a' is equalto 'a' }}|{{ 1 is eq 2 }}|{{ 2 is in [1, 2] }}|{{ 'ab' is lower }}|{{ 'AB' is upper }}|{{ range is callable }}",
     {}),
    ("{{ c is mapping or c is iterable }}|{{ c is string }}", {"c": {"a": 1}}),
    # statements
    ("{% if x > 1 %}big{% elif x == 1 %}one{% else %}small{% endif %}", {"x": 1}),
    ("{% for i in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }};{% endfor %}",
     {"xs": ["a", "b", "c"]}),
    ("{% for i in xs %}{{ loop.previtem | default('-') }}>{{ i }}>{{ loop.nextitem | default('-') }} {% endfor %}",
     {"xs": [1, 2, 3]}),
    ("{% for i in xs %}{{ i }}{% else %}empty{% endfor %}|{% for i in [] %}{{ i }}{% else %}empty{% endfor %}",
     {"xs": [1]}),
    ("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
     {}),
    ("{% for i in range(6) if i is even %}{{ i }}{{ '' if loop.last else ',' }}{% endfor %}|{{ range(2, 8, 3) | list }}",
     {}),
    ("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }} {% endfor %}|{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}",
     {}),
    ("{% for i in xs %}{{ loop.cycle('odd', 'even') }} {% endfor %}", {"xs": [1, 2, 3]}),
    ("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("{% for i in [1, 2] %}{% if loop.first %}{% set y = 5 %}{% endif %}{{ y }}.{% endfor %}", {}),
    ("{% set ns = namespace(n=0, found=false) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.n }}|{{ ns.found }}",
     {}),
    ("{% set ns = namespace() %}{% set ns.index = 0 %}{{ ns.index }}|{{ ns.other is defined }}", {}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t = 1, 2 %}{{ t }}", {}),
    ("{% set block %}inner {{ 1 + 1 }}{% endset %}[{{ block }}]", {}),
    ("{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', greeting='Hi') }}",
     {}),
    ("{% macro m(a) %}{{ a }}{{ g }}{% endmacro %}{% set g = 3 %}{{ m(1) }}", {}),
    ("{{ dict(a=1, b='x') }}|{{ dict(a=1).a }}", {}),
    ("{{ strftime_now('%Y-%m-%d %H:%M %a %b %d %B %A') }}", {}),
    ("{% generation %}gen {{ 1 }}{% endgeneration %}", {}),
    ("{# a comment #}x{#- trimmed -#}  y", {}),
    ("{% raw %}{{ not rendered }} {% if %}{% endraw %}", {}),
    # whitespace control: trim_blocks, lstrip_blocks, -, +
    ("{% if true %}\n  yes\n{% endif %}\n  {{ 'v' }}\n", {}),
    ("a\n    {% if true %}\n    b\n    {% endif %}\nc", {}),
    ("a  {%- if true -%}  b  {%- endif -%}  c", {}),
    ("a\n  {%+ if true %}b{% endif +%}\nc", {}),
    ("{{- ' x ' -}}\n  \n{{ 'y' }}  \n  {{- 'z' }}", {}),
    ("  {# comment #}\nline\n", {}),
    ("x\r\ny\rz\n\n", {}),
    ("{% for m in ms %}\n  {{ m }}\n{% endfor %}\n", {"ms": ["a", "b"]}),
    ("{{ '{{' }}literal braces{{ '}}' }}|{{ {'a': {'b': 1}} }}", {}),
    # constructs from newer HF templates (Qwen3, Llama 4, SmolLM3)
    ("{%- for m in ms[::-1] %}{%- set index = (ms|length - 1) - loop.index0 %}{{ index }}:{{ m }} {% endfor %}",
     {"ms": ["a", "b", "c"]}),
    ("{%- set ns = namespace(multi_step_tool=true, last_query_index=ms|length - 1) %}{{ ns.last_query_index }}|{{ not(ms[0].startswith('<tool_response>') and ms[0].endswith('</tool_response>')) }}",
     {"ms": ["<tool_response>x</tool_response>", "b"]}),
    ("{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}",
     {"c": "<think>\nreason\n</think>\nanswer"}),
    ("{{ (c | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('\\n')) }}",
     {"c": [{"type": "text", "text": "one"}, {"type": "image"}, {"type": "text", "text": "two"}]}),
    ("{%- if c is string -%}{{ c }}{%- else -%}{%- for part in c -%}{{ part.text }}{%- endfor -%}{%- endif %}",
     {"c": [{"text": "x"}, {"text": "y"}]}),
    ("{{ tool.function.parameters.properties | items | map('first') | join(',') }}",
     {"tool": {"function": {"parameters": {"properties": {"a": {}, "b": {}}}}}}),
    ("{% for m in ms %}{% if m.role == 'system' %}{% continue %}{% endif %}{{ m.role[0] | upper }}{% endfor %}",
     {"ms": [{"role": "system"}, {"role": "user"}, {"role": "assistant"}]}),
    ("<{{ '\\n'.join(['a', 'b']) }}>|{{ 'x' ~ none ~ 1 }}|{{ [1, 2] | join(' ') | length }}", {}),
    # errors: raise_exception keeps its message; other failures are errors too
    ("{{ raise_exception('Custom failure: roles must alternate!') }}", {}),
    ("before{% if true %}{{ raise_exception('inside ' + 'if') }}{% endif %}", {}),
    ("{{ missing.attr }}", {}),
    ("{{ 'a' + 1 }}", {}),
    ("{{ missing + 1 }}", {}),
    ("{{ x | tojson }}", {}),
    ("{{ none.x.y }}", {}),
    ("{% set ns = namespace() %}{% set ns._private = 1 %}", {}),
    ("{% set d = {} %}{% set d.x = 1 %}", {}),
    ("{{ [1, 2].append(3) }}", {}),
    ("{{ 1 // 0 }}", {}),
    ("{{ 1 < 'a' }}", {}),
    ("{% for a, b in [[1, 2, 3]] %}{% endfor %}", {}),
]


def make_expression_goldens():
    cases = []
    for template, context in EXPRESSIONS:
        case = {"template": template, "context": context}
        try:
            case["expected"] = ctu._compile_jinja_template(template).render(**context)
        except Exception as error:  # noqa: BLE001
            case["error"] = describe_error(error)
        cases.append(case)
    return {"versions": versions(), "fixed_now": FIXED_NOW.isoformat(), "cases": cases}


def cross_check_with_tokenizers(assets, goldens):
    """Checks that the goldens equal tokenizer.apply_chat_template(tokenize=False) wherever a
    tokenizer loads from the asset directory, so the plain render above is what users get."""
    from transformers import AutoTokenizer

    checked = 0
    tokenizers = {}
    for case in goldens["cases"]:
        template_id = case["template"]
        if not template_id.endswith("/tokenizer_config.json"):
            continue
        if template_id not in tokenizers:
            directory = assets / Path(template_id).parent
            try:
                tokenizers[template_id] = AutoTokenizer.from_pretrained(str(directory))
            except Exception as error:  # noqa: BLE001 - some asset dirs have no loadable tokenizer
                print(f"  cross-check skipped for {template_id}: {type(error).__name__}")
                tokenizers[template_id] = None
        tokenizer = tokenizers[template_id]
        if tokenizer is None:
            continue
        conversation = CONVERSATIONS[case["conversation"]]
        extra = dict(conversation.get("extra", {}))
        tools = extra.pop("tools", None)
        try:
            actual = tokenizer.apply_chat_template(
                conversation["messages"], tools=tools, tokenize=False,
                add_generation_prompt=case["add_generation_prompt"], **extra)
        except Exception as error:  # noqa: BLE001
            actual = describe_error(error)
        expected = case.get("expected", case.get("error"))
        if actual != expected:
            raise SystemExit(f"apply_chat_template disagrees for {template_id} "
                             f"{case['conversation']}: {actual!r} != {expected!r}")
        checked += 1
    print(f"  cross-checked {checked} cases against tokenizer.apply_chat_template")


def write(path, data):
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path.relative_to(REPO)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--assets", type=Path, default=REPO.parent / "shared" / "assets")
    args = parser.parse_args()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    render_goldens = make_render_goldens(args.assets)
    cross_check_with_tokenizers(args.assets, render_goldens)
    write(OUT_DIR / "render_goldens.json", render_goldens)
    write(OUT_DIR / "expression_goldens.json", make_expression_goldens())


if __name__ == "__main__":
    main()
