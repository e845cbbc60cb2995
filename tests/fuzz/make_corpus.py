#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/, docs/reliability.md).

Run from the repo root:
  /opt/kiln-venv/bin/python tests/fuzz/make_corpus.py --artifact DIR [--artifact DIR ...]

Every seed is small and made here from tests/data or written out below; nothing is copied from
../shared/assets (scripts/fuzz.sh adds those files as extra seeds at run time when present).
--artifact names compiled model.kiln directories (`kiln compile tests/data/models/tiny-llama -o
DIR`); their plan.kiln and manifest.json become the artifact_fuzz seeds (plan3: `kiln compile
tests/data/gguf/tiny-llama.gguf --max-batch 2 --max-seq-len 64`, whose matrices are quantized Q8). A rerun with the same
artifacts writes the same bytes. Inputs standing for several files join them with SEP, as
tests/fuzz/fuzz_util.h splits them.
"""

import argparse
import gzip
import io
import json
import os
import re
import struct
import tarfile

import gguf
import numpy as np

SEP = b"\n--kiln-fuzz-next-file--\n"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(REPO, "tests/data")
OUT = os.path.join(REPO, "tests/fuzz/corpus")


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write(target, name, data):
    os.makedirs(os.path.join(OUT, target), exist_ok=True)
    with open(os.path.join(OUT, target, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def compactJson(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def artifactSeeds(dirs):
    for i, d in enumerate(dirs):
        plan, manifest = read(os.path.join(d, "plan.kiln")), read(os.path.join(d, "manifest.json"))
        write("artifact_fuzz", f"plan{i}", plan)  # the target writes a matching manifest
        if i == 0:
            write("artifact_fuzz", f"plan{i}-manifest", plan + SEP + manifest)


def safetensorsFile(tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = compactJson(header)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def safetensorsSeeds():
    f32 = np.arange(6, dtype=np.float32).tobytes()
    f16 = np.array([1, -2, 0.5, 65504], dtype=np.float16).tobytes()
    bf16 = (np.array([1, 2, 3, 4], dtype=np.float32).view(np.uint32) >> 16).astype(
        np.uint16).tobytes()
    single = safetensorsFile(
        [("model.embed_tokens.weight", "F32", [2, 3], f32), ("model.norm.weight", "F16", [4], f16),
         ("model.layers.0.mlp.up_proj.weight", "BF16", [2, 2], bf16), ("empty", "F32", [0, 5], b"")],
        metadata={"format": "pt", "lm_head.weight": "model.embed_tokens.weight"})
    write("safetensors_fuzz", "single", single)
    shard1 = safetensorsFile([("a.weight", "F32", [2, 3], f32)])
    shard2 = safetensorsFile([("b.weight", "F16", [2, 2], f16)])
    index = compactJson({"metadata": {"total_size": len(f32) + len(f16)}, "weight_map": {
        "a.weight": "model-00001-of-00002.safetensors",
        "b.weight": "model-00002-of-00002.safetensors"}})
    write("safetensors_fuzz", "sharded", index + SEP + shard1 + SEP + shard2)


def hfConfigSeeds():
    for model in ["tiny-llama", "tiny-llama3", "tiny-mistral-window20", "tiny-phi3-longrope",
                  "tiny-qwen2-dynamic", "tiny-qwen3"]:
        d = os.path.join(DATA, "models", model)
        config = read(os.path.join(d, "config.json"))
        generation = os.path.join(d, "generation_config.json")
        write("hf_config_fuzz", model,
              config + (SEP + read(generation) if os.path.exists(generation) else b""))
    yarn = {"model_type": "qwen2", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
            "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6,
                                "original_max_position_embeddings": 32, "beta_fast": 16},
            "partial_rotary_factor": 0.5, "eos_token_id": [2, 3], "dtype": "bfloat16"}
    write("hf_config_fuzz", "yarn-rope-parameters", compactJson(yarn))


def tokenizerJsonSeeds():
    d = os.path.join(DATA, "models", "tiny-llama")
    tokenizer, config = read(os.path.join(d, "tokenizer.json")), read(
        os.path.join(d, "tokenizer_config.json"))
    write("tokenizer_json_fuzz", "byte-level-bpe", tokenizer + SEP + config)
    spec = json.loads(tokenizer)
    spec["normalizer"] = {"type": "NFC"}
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"(?i:'s|'t|'re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                                               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s+(?!\S)|\s+"},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    spec["added_tokens"].append({"id": 511, "content": "<|eot|>", "single_word": False,
                                 "lstrip": True, "rstrip": False, "normalized": False,
                                 "special": True})
    write("tokenizer_json_fuzz", "split-regex-nfc", compactJson(spec))
    config = {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True,
              "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"}
    special = {"unk_token": {"content": "<unk>", "lstrip": False}}
    write("tokenizer_json_fuzz", "sentencepiece-bpe",
          compactJson(sentencePieceTokenizer()) + SEP + compactJson(config) + SEP +
          compactJson(special))


def sentencePieceTokenizer():
    """SentencePiece-style BPE: Metaspace via normalizer, byte fallback, decoder chain."""
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + [
        "\u2581", "a", "b", "c", "\u2581a", "ab", "\u2581ab", "abc"]
    spm = {"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [{"id": i, "content": p, "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": True}
                            for i, p in enumerate(pieces[:3])],
           "normalizer": {"type": "Sequence", "normalizers": [
               {"type": "Prepend", "prepend": "\u2581"},
               {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
           "pre_tokenizer": None,
           "post_processor": {"type": "TemplateProcessing",
                              "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                         {"Sequence": {"id": "A", "type_id": 0}}],
                              "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                                       {"Sequence": {"id": "B", "type_id": 1}}],
                              "special_tokens": {"<s>": {"id": "<s>", "ids": [1],
                                                         "tokens": ["<s>"]}}},
           "decoder": {"type": "Sequence", "decoders": [
               {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
               {"type": "ByteFallback"}, {"type": "Fuse"},
               {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
           "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                     "continuing_subword_prefix": None, "end_of_word_suffix": None,
                     "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                     "vocab": {p: i for i, p in enumerate(pieces)},
                     "merges": [["\u2581", "a"], ["a", "b"], ["\u2581a", "b"], ["ab", "c"]]}}
    return spm


def regressionSeeds():
    """The inputs of the crashes fuzzing found (docs/reliability.md), kept as seeds so that every
    run of scripts/fuzz.sh replays them first. One is not written here: artifact_fuzz's
    regress-misaligned-shape is the fuzzer's own input, kept as found (a plan.kiln whose shape
    vector was moved 4 bytes off its alignment)."""
    config = json.loads(read(os.path.join(DATA, "models", "tiny-llama", "config.json")))
    config["head_dim"] = 1 << 40
    write("hf_config_fuzz", "regress-head-dim-2e40", compactJson(config))
    cases = {
        "vocab-id-2e9": lambda t: t["model"]["vocab"].update({"abc": 2000000000}),
        "added-id-1.5e9": lambda t: t["added_tokens"][2].update({"id": 1500000000}),
        "template-id-number": lambda t: t["post_processor"]["single"][0]["SpecialToken"].update(
            {"id": 5}),
        "template-ids-string": lambda t: t["post_processor"]["special_tokens"]["<s>"].update(
            {"ids": ["x"]}),
        "template-id-past-vocab": lambda t: t["post_processor"]["special_tokens"]["<s>"].update(
            {"ids": [100000]}),
    }
    for name, mutate in cases.items():
        spec = sentencePieceTokenizer()
        mutate(spec)
        write("tokenizer_json_fuzz", "regress-" + name, compactJson(spec))
    templates = {
        "nested-ranges": "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}"
                         "{% endfor %}",
        "macro-doubling": "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}"
                          "{% endmacro %}{{ f(40) }}",
        "string-doubling": "{% set ns = namespace(s='a') %}{% for i in range(40) %}"
                           "{% set ns.s = ns.s + ns.s %}{% endfor %}",
        "repeat-int64": "{{ 'ab' * 9223372036854775807 }}",
        "tuple-repr": "{% macro f(n) %}{% if n > 0 %}{{ (f(n - 1), f(n - 1)) }}{% endif %}"
                      "{% endmacro %}{{ f(30) }}",
    }
    for name, source in templates.items():
        write("chat_template_fuzz", "regress-" + name, source)
    write("serve_request_fuzz", "regress-min-above-max-tokens",
          bytes([0]) + compactJson({"prompt": "a", "max_tokens": 4, "min_tokens": 5}))
    write("serving_properties_fuzz", "regress-model-id-too-long", "option.model_id=" + "x" * 300)
    write("structured_fuzz", "regress-empty-class", 'groot ::= "[= := "[= [a-z\u00e8][]+\n')
    write("s3_xml_fuzz", "regress-size-past-uint64",
          "<ListBucketResult><Contents><Key>k</Key><Size>99999999999999999999</Size></Contents>"
          "</ListBucketResult>")


def unescapeCorpusLine(line):
    out, i = [], 0
    while i < len(line):
        if line[i] == "\\" and i + 1 < len(line):
            c = line[i + 1]
            if c in "nrt\\":
                out.append({"n": "\n", "r": "\r", "t": "\t", "\\": "\\"}[c])
                i += 2
                continue
            if c == "u" and line[i + 2:i + 3] == "{":
                end = line.index("}", i)
                if end > i + 3:
                    out.append(chr(int(line[i + 3:end], 16)))
                i = end + 1
                continue
        out.append(line[i])
        i += 1
    return "".join(out)


def tokenizerEncodeSeeds():
    lines = [unescapeCorpusLine(l.rstrip("\n")) for l in open(os.path.join(DATA, "tokenizer",
                                                                        "corpus.txt"),
                                                                encoding="utf-8")
             if not l.startswith("#")]
    groups = [lines[i::6] for i in range(6)]
    for i, group in enumerate(groups):  # byte 0: tokenizer, byte 1: flags
        write("tokenizer_encode_fuzz", f"corpus{i}", bytes([i, i % 4]) + "\n".join(group).encode())
    write("tokenizer_encode_fuzz", "invalid-utf8", bytes([0, 0]) + b"ok \xff\xc3 \xe4\xbd <s>x</s>")


CHAT_TEMPLATES = {
    "chatml-tools": """{%- if tools %}<|im_start|>system
{{ messages[0].content if messages[0].role == 'system' else 'You are helpful.' }}
# Tools
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}<|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% elif message.role == 'assistant' %}<|im_start|>assistant
{%- if message.content %}{{ '\\n' + message.content }}{% endif %}
{%- for call in message.tool_calls | default([]) %}
<tool_call>{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}</tool_call>
{%- endfor %}<|im_end|>
{% elif message.role == 'tool' %}<|im_start|>user
<tool_response>{{ message.content }}</tool_response><|im_end|>
{% endif %}{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}""",
    "llama2-raise": """{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}\
{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}\
{% set system_message = false %}{% endif %}{% for message in loop_messages %}\
{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\
{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}\
{% endif %}{% if loop.index0 == 0 and system_message != false %}\
{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}\
{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}\
{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}\
{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}""",
    "features": """{%- macro render(m, prefix='> ') -%}{{ prefix }}{{ m.role | upper }}: \
{{ (m.content if m.content is string else m.content | map(attribute='text') | join(' ')) | trim }}\
{%- endmacro -%}
{%- set ns = namespace(count=0, last=none) -%}
{%- for m in messages | selectattr('role', 'ne', 'tool') -%}
{%- set ns.count = ns.count + 1 -%}{{ render(m) }}{{ '\\n' if not loop.last }}
{%- endfor %}
count={{ ns.count }} len={{ messages | length }} rev={{ 'abc'[::-1] }} {{ [3,1,2] | sort | list }}
{{ {'b': 1, 'a': 2} | dictsort }} {% for k, v in {'x': 1}.items() %}{{ k }}={{ v }}{% endfor %}
{{ strftime_now('%Y-%m-%d') }} {{ date_string | default('none') }} {{ 7 // 2 }} {{ 7 % 3 }} {{ 2 ** 8 }}
{{ 'a,b' .split(',') | join('|') }} {{ 'x' ~ 1 ~ none }} {{ range(3) | list }} {{ tools is defined }}
{%- if enable_thinking is true %}<think>{% elif enable_thinking is false %}nothink{% endif %}
{%- raw %}{{ not rendered }}{% endraw %}{# a comment #}""",
}


def chatTemplateSeeds():
    for name, source in CHAT_TEMPLATES.items():
        write("chat_template_fuzz", name, source)
    cases = json.load(open(os.path.join(DATA, "chat_templates", "expression_goldens.json")))[
        "cases"]
    plain = [c["template"] for c in cases if not c["context"]]
    write("chat_template_fuzz", "expressions", "\n".join(plain[:40]))
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
                {"role": "user", "content": [{"type": "text", "text": "x"}]}]
    write("chat_template_fuzz", "chatml-own-messages",
          CHAT_TEMPLATES["chatml-tools"].encode() + SEP + compactJson(messages))


def serveRequestSeeds():
    bodies = {
        "completion": (0, {"model": "m", "prompt": "Once upon", "max_tokens": 8, "temperature": 0.7,
                           "top_p": 0.9, "top_k": 40, "min_p": 0.05, "stop": ["\n", "END"],
                           "seed": 7, "n": 2, "best_of": 2, "logprobs": 3, "echo": True,
                           "presence_penalty": 0.5, "frequency_penalty": -0.5,
                           "repetition_penalty": 1.1, "stream": True,
                           "stream_options": {"include_usage": True}, "ignore_eos": False,
                           "min_tokens": 1, "stop_token_ids": [2], "return_token_ids": True}),
        "completion-batch": (0, {"prompt": [[1, 2, 3], "text", [4]], "max_tokens": 1}),
        "chat": (1, {"model": "m", "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "w", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "22 C"}],
            "tools": [{"type": "function", "function": {"name": "w", "parameters": {}}}],
            "tool_choice": "auto", "max_completion_tokens": 16, "logprobs": True,
            "top_logprobs": 2, "add_generation_prompt": True,
            "chat_template_kwargs": {"enable_thinking": False}, "response_format": {"type": "text"}}),
        "chat-tool-required": (1, {"messages": [{"role": "user", "content": "weather?"}],
            "tools": [{"type": "function", "function": {"name": "w", "parameters": {
                "type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
                "required": ["city"], "additionalProperties": False}}},
                {"type": "function", "function": {"name": "t", "parameters": {
                    "$defs": {"z": {"enum": ["UTC", "CET"]}}, "type": "object",
                    "properties": {"zone": {"$ref": "#/$defs/z"}}}}}],
            "tool_choice": "required", "parallel_tool_calls": False, "max_tokens": 32}),
        "chat-tool-named": (1, {"messages": [{"role": "user", "content": "weather?"}],
            "tools": [{"type": "function", "function": {"name": "w"}}],
            "tool_choice": {"type": "function", "function": {"name": "w"}}}),
        "generate": (2, {"inputs": "Hello", "parameters": {
            "max_new_tokens": 5, "do_sample": True, "temperature": 0.5, "top_k": 10, "top_p": 0.95,
            "typical_p": None, "repetition_penalty": 1.2, "stop": ["x"], "seed": 3,
            "details": True, "decoder_input_details": False, "return_full_text": True,
            "top_n_tokens": 2}, "stream": False}),
        "invocations-tgi": (3, {"inputs": "Hi", "parameters": {"max_new_tokens": 2}}),
        "invocations-chat": (3, {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}),
        "invocations-completion": (3, {"prompt": "Hi", "max_tokens": 2}),
    }
    for name, (endpoint, body) in bodies.items():
        write("serve_request_fuzz", name, bytes([endpoint]) + compactJson(body))
    write("serve_request_fuzz", "not-json", bytes([1]) + b'{"messages": [\xff')


def servingPropertiesSeeds():
    write("serving_properties_fuzz", "lmi", """# SageMaker LMI serving.properties
engine=Python
option.model_id=s3://bucket/kiln/llama.kiln
option.tensor_parallel_degree=max
option.max_rolling_batch_size=16
option.max_model_len : 2048
option.dtype=fp16
option.rolling_batch=lmi-dist
option.output_formatter=sse
option.gpu_memory_utilization=0.85
option.seed=42
! another comment style
""")
    write("serving_properties_fuzz", "environment-names", """OPTION_MAX_NUM_SEQS=8
SM_NUM_GPUS=4
NUM_SHARD=2
TENSOR_PARALLEL_DEGREE=2
OPTION_TENSOR_PARALLEL_DEGREE=1
MAX_CONCURRENT_REQUESTS=100
MAX_TOTAL_TOKENS=4096
SAGEMAKER_BIND_TO_PORT=8080
HF_MODEL_ID=s3://b/p
option.served_model_name=tiny
option.chat_template=/opt/ml/model/t.jinja
""")


def s3XmlSeeds():
    write("s3_xml_fuzz", "list-truncated", """<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name>\
<Prefix>kiln/a&amp;b</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys>\
<IsTruncated>true</IsTruncated><NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=\
</NextContinuationToken><Contents><Key>kiln/a&amp;b/plan.kiln</Key>\
<LastModified>2024-09-26T10:30:00.000Z</LastModified><ETag>&quot;9b2cf535f27731c974343645a3985328\
&quot;</ETag><Size>8632</Size><StorageClass>STANDARD</StorageClass></Contents><Contents>\
<Key>kiln/a&amp;b/&lt;weights&gt;.bin</Key><Size>18446744073709551615</Size></Contents>\
</ListBucketResult>""")
    write("s3_xml_fuzz", "error", """<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>\
<RequestId>4442587FB7D0A2F9</RequestId></Error>""")
    write("s3_xml_fuzz", "multipart", """<?xml version="1.0" encoding="UTF-8"?>
<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key>\
<UploadId>VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA</UploadId>\
</InitiateMultipartUploadResult><CopyPartResult><ETag>&quot;abc&quot;</ETag></CopyPartResult>""")


def tarBytes(entries, compress=False):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, kind, payload in entries:
            info = tarfile.TarInfo(name)
            info.mtime = 0
            if kind == "file":
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
            else:
                info.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
                             "hardlink": tarfile.LNKTYPE}[kind]
                info.linkname = payload or ""
                tar.addfile(info)
    data = buffer.getvalue().rstrip(b"\0")
    data += b"\0" * (-len(data) % 512) + b"\0" * 1024  # the end-of-archive blocks
    return gzip.compress(data, mtime=0) if compress else data


def tarSeeds():
    import hashlib
    config = b'{"model_type": "llama"}\n'
    manifest = compactJson({"format": "kiln-artifact", "files": [
        {"name": "config.json", "size": len(config), "sha256": hashlib.sha256(config).hexdigest()}]})
    artifact = [("manifest.json", "file", manifest), ("config.json", "file", config)]
    write("tar_fuzz", "artifact.tar", tarBytes(artifact))
    write("tar_fuzz", "artifact.tar.gz", tarBytes(artifact, compress=True))
    write("tar_fuzz", "links.tar", tarBytes([
        ("./d", "dir", None), ("d/f", "file", b"x"), ("d/link", "symlink", "f"),
        ("d/hard", "hardlink", "d/f"), ("up", "symlink", "../outside")]))


def ggufSeeds():
    write("gguf_fuzz", "tiny.gguf", read(os.path.join(DATA, "gguf", "tiny.gguf")))
    write("gguf_fuzz", "stories260k-tokenizer.gguf",
          read(os.path.join(DATA, "gguf", "stories260k-tokenizer.gguf")))
    # A whole llama model at the smallest size Q8_0 blocks allow, with a byte-level BPE vocab.
    path = os.path.join(OUT, "gguf_fuzz", "mini-llama.gguf")
    hidden, vocab = 32, 32
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(64)
    w.add_embedding_length(hidden)
    w.add_block_count(1)
    w.add_feed_forward_length(hidden)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(16)
    w.add_vocab_size(vocab)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    tokens = ["<unk>", "<s>", "</s>"] + [chr(c) for c in range(ord("a"), ord("a") + 26)] + [
        "\u0120", "\u0120a", "ab"]
    w.add_token_list(tokens)
    w.add_token_types([3, 3, 3] + [1] * (len(tokens) - 3))
    w.add_token_merges(["\u0120 a", "a b"])
    w.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}")
    rng = np.random.default_rng(1)
    q8 = gguf.GGMLQuantizationType.Q8_0
    shapes = {"token_embd.weight": (vocab, hidden), "output_norm.weight": (hidden,),
              "blk.0.attn_norm.weight": (hidden,), "blk.0.ffn_norm.weight": (hidden,),
              "blk.0.attn_q.weight": (hidden, hidden), "blk.0.attn_k.weight": (16, hidden),
              "blk.0.attn_v.weight": (16, hidden), "blk.0.attn_output.weight": (hidden, hidden),
              "blk.0.ffn_gate.weight": (hidden, hidden), "blk.0.ffn_up.weight": (hidden, hidden),
              "blk.0.ffn_down.weight": (hidden, hidden)}
    for name, shape in shapes.items():
        data = rng.standard_normal(shape).astype(np.float32)
        if len(shape) == 2 and name != "token_embd.weight":
            w.add_tensor(name, gguf.quants.quantize(data, q8), raw_dtype=q8)
        else:
            w.add_tensor(name, data.astype(np.float16) if len(shape) == 2 else data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# The sources whose JSON field names go into dict/json.dict.
JSON_PARSERS = [
    "runtime/text/tokenizer.cc", "runtime/text/tokenizer_json.cc", "runtime/text/normalizer.cc",
    "runtime/text/pre_tokenizer.cc", "runtime/text/decoder.cc", "runtime/text/tokenizer_added.cc",
    "runtime/text/chat_template.cc", "compiler/import/hf_config.cc",
    "compiler/import/rope_scaling.cc", "compiler/import/config_fields.cc",
    "runtime/serve/openai_request.cc", "runtime/serve/tgi_request.cc",
    "runtime/artifact/artifact.cc", "compiler/import/safetensors.cc",
    "runtime/store/manifest_files.cc"]
JSON_TOKENS = ["{", "}", "[", "]", ":", ",", "null", "true", "false", "-1", "0", "1e400", "1.5",
               "4294967296", "18446744073709551616", "-9223372036854775809", '"\\u0000"',
               '"\\ud800"', "[[[[[[[[", "{}", "[]", '""']
JINJA_TOKENS = ["{{", "}}", "{%", "%}", "{#", "#}", "{%-", "-%}", "{{-", "-}}", "for", "endfor",
                "if", "elif", "else", "endif", "set", "endset", "macro", "endmacro", "call",
                "endcall", "filter", "endfilter", "raw", "endraw", "generation", "endgeneration",
                "in", "not", "and", "or", "is", "loop", "namespace", "range", "none", "true",
                "defined", "string", "mapping", "iterable", "tojson", "trim", "join", "map",
                "selectattr", "rejectattr", "attribute", "default", "length", "items", "upper",
                "lower", "replace", "split", "startswith", "endswith", "strftime_now",
                "raise_exception", "messages", "message", "content", "role", "tools",
                "add_generation_prompt", "bos_token", "[::-1]", "[1:]", "~", "//", "**", "|"]
XML_TOKENS = ["<Contents>", "</Contents>", "<Key>", "</Key>", "<Size>", "</Size>",
              "<IsTruncated>", "</IsTruncated>", "true", "<NextContinuationToken>",
              "</NextContinuationToken>", "<Code>", "</Code>", "<Message>", "</Message>",
              "<UploadId>", "</UploadId>", "<ETag>", "</ETag>", "<Error>", "&amp;", "&lt;",
              "&gt;", "&quot;", "&apos;", "18446744073709551616"]


def dictEntry(token):
    return '"' + token.replace("\\", "\\\\").replace('"', '\\"') + '"'


def dictionaries():
    names = set()
    for source in JSON_PARSERS:
        names.update(n for n in re.findall(r'"([A-Za-z_][A-Za-z0-9_]+)"',
                                            read(os.path.join(REPO, source)).decode()))
    os.makedirs(os.path.join(REPO, "tests/fuzz/dict"), exist_ok=True)
    for name, tokens in [("json", JSON_TOKENS + ['"%s"' % n for n in sorted(names)]),
                         ("jinja", JINJA_TOKENS), ("xml", XML_TOKENS)]:
        with open(os.path.join(REPO, "tests/fuzz/dict", name + ".dict"), "w") as f:
            f.write("# libFuzzer dictionary, written by tests/fuzz/make_corpus.py\n")
            f.write("".join(dictEntry(t) + "\n" for t in tokens))


def structuredSeeds():
    """structured_fuzz: the first byte picks grammar text (g), a regex (r) or a JSON schema (j)."""
    write("structured_fuzz", "grammar-list", 'groot ::= "[" (item ("," item)*)? "]"\n'
          'item ::= [a-z\u00e9]{1,3} | [0-9]+\n')
    write("structured_fuzz", "grammar-string", 'groot ::= "\\"" ([^"\\\\] | "\\\\" .)* "\\""\n')
    write("structured_fuzz", "regex-phone", r"r\(?\d{3}\)?[ -]\d{3}-\d{4}")
    write("structured_fuzz", "regex-alternation", r"r(?:cat|dog)s?|[A-Z][a-z]{1,6}")
    write("structured_fuzz", "schema-person", b"j" + compactJson({
        "type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                         "age": {"type": "integer", "minimum": 0}},
        "required": ["name"], "additionalProperties": False}))
    write("structured_fuzz", "schema-ref-list", b"j" + compactJson({
        "$defs": {"node": {"type": "object",
                           "properties": {"v": {"type": "integer"},
                                          "next": {"anyOf": [{"$ref": "#/$defs/node"},
                                                             {"type": "null"}]}},
                           "required": ["v", "next"]}},
        "$ref": "#/$defs/node"}))
    write("structured_fuzz", "schema-array-enum", b"j" + compactJson({
        "type": "array", "items": {"enum": ["a", 1, None, True]}, "maxItems": 3}))


def toolCallSeeds():
    """tool_call_fuzz: format byte (h, l, m, f), piece-size byte, then a model's output."""
    call = '{"name": "get_weather", "arguments": {"city": "Z\u00fcrich", "days": [1, 2]}}'
    write("tool_call_fuzz", "hermes-two", "h\x03Sure.\n<tool_call>\n" + call +
          "\n</tool_call>\n<tool_call>" + call + "</tool_call>")
    write("tool_call_fuzz", "llama3-two", 'l\x05{"name": "f", "parameters": {"a": "}"}}; ' + call)
    write("tool_call_fuzz", "mistral-array", "m\x01Checking.[TOOL_CALLS] [" + call + ", " + call +
          "]")
    write("tool_call_fuzz", "forced-array", 'f\x07[{"name": "f", "parameters": {"q": "\\\""}}]')


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", action="append", default=[],
                        help="a compiled model.kiln directory (repeatable)")
    args = parser.parse_args()
    if args.artifact:
        artifactSeeds(args.artifact)
    safetensorsSeeds()
    hfConfigSeeds()
    tokenizerJsonSeeds()
    tokenizerEncodeSeeds()
    chatTemplateSeeds()
    serveRequestSeeds()
    structuredSeeds()
    toolCallSeeds()
    servingPropertiesSeeds()
    s3XmlSeeds()
    tarSeeds()
    ggufSeeds()
    regressionSeeds()
    dictionaries()


if __name__ == "__main__":
    main()
