#!/usr/bin/env python3
"""Writes tests/data/golden/chat_prompt_ids.json: chat prompt ids of real tokenizers, for serving.

Run from the repo root:  /opt/kiln-venv/bin/python tools/goldens/make_chat_prompt_goldens.py
(/opt/vllm-venv/bin/python has the same versions). --only NAME (repeatable) regenerates only those
tokenizers' entries and keeps the others byte for byte; it refuses unless the file's other fields
(versions included) are what this run would write.

For the Qwen2.5, Mistral-7B-Instruct-v0.3, Phi-3-mini and Gemma 2 tokenizers in
$KILN_ASSETS_DIR/tokenizers (read in place, never copied), three conversations each: the text and
the ids of AutoTokenizer.from_pretrained(dir).apply_chat_template(messages,
add_generation_prompt=True), plus the tokenizer's size and bos/eos ids. A conversation whose
template raises (Gemma 2's rejects a system message) is recorded as `skipped` with the exception.
Gemma (v1): the assets hold only its tokenizer_config.json (with the Gemma instruct template) and
special_tokens_map.json, no tokenizer.json. Gemma and Gemma 2 share one 256000-piece vocabulary, so
its entry takes tokenizer.json from tokenizers/gemma2 (`tokenizer_json_from`), the two config files
from tokenizers/gemma; the script checks the substitution first (gemma2's tokenizer.json encodes
swift-transformers' Gemma expectations to their ids; the ids Gemma's added_tokens_decoder declares
are the same tokens in it) and records what it checked (`tokenizer_json_evidence`). kiln has no
Gemma (v1) architecture, so its tiny model is Gemma 2's.
The Gemma 2 tokenizer_config.json of the assets has no chat_template: the tokenizer gets google/
gemma-2-2b-it's template from $KILN_ASSETS_DIR/chat_templates/google-gemma-2-2b-it.jinja, and its
entry names that file (`chat_template`), which a test copies into the model directory as
chat_template.jinja. Qwen2.5 and Mistral, whose templates print the tools,
also get `tool_cases`: one conversation rendered with apply_chat_template(messages, tools=tools,
...), its tool's JSON schema keys deliberately not in sorted order (the templates print the tools
with tojson, which keeps the order they were given in, so a server must keep the client's order).
Where the installed transformers tokenizes the rendered text differently from tokenizer.json run by
the tokenizers library, both id lists are stored.
Each tokenizer also gets a tiny random model description (hidden 16, 1 layer, the family's
architecture, the published vocab size): real vocabularies make its weights megabytes, so none is
committed; a test generates the weights. The script builds each one in a temporary directory
(--write-models DIR keeps them) and runs every prompt through it, so the description is loadable.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

import jinja2
import tokenizers
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_fixtures as fx  # noqa: E402
import make_llama_goldens as mlg  # noqa: E402

transformers.logging.set_verbosity_error()
transformers.logging.disable_progress_bar()

kConversations = {
    "single_user": [
        {"role": "user", "content": "What is the capital of France?"},
    ],
    "system_user": [
        {"role": "system", "content": "You are a concise assistant. Answer in one sentence."},
        {"role": "user", "content": "Explain what a KV cache is."},
    ],
    "multi_turn": [
        {"role": "user", "content": "Hi! Can you count to three?"},
        {"role": "assistant", "content": "Sure: one, two, three."},
        {"role": "user", "content": "Now backwards, please. Café costs 3,50 €."},
    ],
}

# A get_weather tool as an OpenAI client sends it. Every object's keys are out of sorted order
# ("type" before "function", "name" before "description", "type" before "properties" before
# "required"), so a renderer that sorts them renders a different prompt.
kGetWeatherTool = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a given city.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string",
                             "description": "The city and country, e.g. Paris, France"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                         "description": "The temperature unit to answer in"},
            },
            "required": ["location"],
        },
    },
}

# Conversations rendered with tools, for the tokenizers in kToolTokenizers (Phi-3-mini's and
# Gemma 2's templates have no tools).
kToolConversations = {
    "get_weather": {
        "messages": [
            {"role": "system", "content": "You are a helpful assistant with access to tools."},
            {"role": "user", "content": "What is the weather like in Paris right now?"},
        ],
        "tools": [kGetWeatherTool],
    },
    # A call and its result rendered back. The arguments are an object here, as transformers'
    # templates expect; an OpenAI client sends them as JSON text, which the server (like vLLM)
    # turns into the object before rendering. The id is 9 letters or digits: Mistral's template
    # accepts no other.
    "tool_roundtrip": {
        "messages": [
            {"role": "user", "content": "What is the weather like in Paris right now?"},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": "Ab3dE6gH9", "type": "function",
                "function": {"name": "get_weather",
                             "arguments": {"location": "Paris, France", "unit": "celsius"}}}]},
            {"role": "tool", "tool_call_id": "Ab3dE6gH9", "name": "get_weather",
             "content": "{\"temperature\": 22, \"unit\": \"celsius\"}"},
        ],
        "tools": [kGetWeatherTool],
    },
}
kToolTokenizers = ("qwen2.5", "mistral-7b-instruct-v0.3")

kTinyDims = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
             "num_attention_heads": 2, "num_key_value_heads": 1}

# Per tokenizer: the family, the vocab size of the published checkpoints (the embedding is padded
# beyond len(tokenizer)), and the config / generation_config a tiny model of it should have.
kTokenizers = {
    "qwen2.5": {
        "dir": "tokenizers/qwen2.5",
        "architecture": "Qwen2ForCausalLM",
        "vocab_size": 151936,
        "vocab_note": "len(tokenizer) 151665 padded to 151936 (a multiple of 128), the vocab_size "
                      "of the published Qwen2.5-0.5B/1.5B/3B(-Instruct) checkpoints (7B+: 152064)",
        "config": {
            "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0,
            "bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu",
            "initializer_range": 0.02, "max_position_embeddings": 32768, "max_window_layers": 1,
            "model_type": "qwen2", "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
            "sliding_window": 32768, "tie_word_embeddings": True, "torch_dtype": "float32",
            "use_cache": True, "use_sliding_window": False},
        "generation_config": {"bos_token_id": 151643, "eos_token_id": [151645, 151643],
                              "pad_token_id": 151643},
        "source": "Qwen2.5-0.5B-Instruct's config.json key set (tied, like the published "
                  "0.5B-3B models) and generation_config eos ids",
    },
    "mistral-7b-instruct-v0.3": {
        "dir": "tokenizers/mistral-7b-instruct-v0.3",
        "architecture": "MistralForCausalLM",
        "vocab_size": 32768,
        "vocab_note": "len(tokenizer) 32768 = the published vocab_size, no padding",
        "config_from_asset": "tokenizers/mistral-7b-instruct-v0.3/config.json",
        "generation_config_from_asset":
            "tokenizers/mistral-7b-instruct-v0.3/generation_config.json",
        "source": "the real Mistral-7B-Instruct-v0.3 config.json / generation_config.json in the "
                  "shared assets, dimensions replaced",
    },
    "phi3-mini": {
        "dir": "tokenizers/phi3-mini",
        "architecture": "Phi3ForCausalLM",
        "vocab_size": 32064,
        "vocab_note": "len(tokenizer) 32011 padded to 32064 (a multiple of 64), the published "
                      "Phi-3-mini vocab_size",
        "config": {
            "architectures": ["Phi3ForCausalLM"], "attention_bias": False,
            "attention_dropout": 0.0, "bos_token_id": 1, "embd_pdrop": 0.0,
            "eos_token_id": 32000, "hidden_act": "silu", "initializer_range": 0.02,
            "max_position_embeddings": 4096, "model_type": "phi3",
            "original_max_position_embeddings": 4096, "pad_token_id": 32000,
            "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_scaling": None,
            "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": False,
            "torch_dtype": "float32", "use_cache": True},
        "generation_config": {"bos_token_id": 1, "eos_token_id": [32000, 32001, 32007],
                              "pad_token_id": 32000},
        "source": "Phi-3-mini-4k-instruct's config.json key set (auto_map left out) and "
                  "generation_config eos ids (<|endoftext|>, <|assistant|>, <|end|>)",
    },
    "gemma2": {
        "dir": "tokenizers/gemma2",
        # the assets' tokenizer_config.json has none: google/gemma-2-2b-it's, verbatim
        "chat_template": "chat_templates/google-gemma-2-2b-it.jinja",
        "architecture": "Gemma2ForCausalLM",
        "vocab_size": 256000,
        "vocab_note": "len(tokenizer) 256000 = the published Gemma 2 (2b/9b/27b) vocab_size, no "
                      "padding",
        "config": {
            "architectures": ["Gemma2ForCausalLM"], "attention_bias": False,
            "attention_dropout": 0.0, "attn_logit_softcapping": 50.0, "bos_token_id": 2,
            "cache_implementation": "hybrid", "eos_token_id": [1, 107],
            "final_logit_softcapping": 30.0, "head_dim": 8, "hidden_act": "gelu_pytorch_tanh",
            "hidden_activation": "gelu_pytorch_tanh", "initializer_range": 0.02,
            "max_position_embeddings": 8192, "model_type": "gemma2", "pad_token_id": 0,
            "query_pre_attn_scalar": 8, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
            "sliding_window": 4096, "tie_word_embeddings": True, "torch_dtype": "float32",
            "use_cache": True},
        "generation_config": {"bos_token_id": 2, "cache_implementation": "hybrid",
                              "eos_token_id": [1, 107], "pad_token_id": 0},
        "source": "google/gemma-2-2b-it's config.json key set (tie_word_embeddings written out, "
                  "Gemma2Config's default; query_pre_attn_scalar = head_dim as in the 2b's 256, "
                  "scaled down with it) and generation_config (eos <eos> 1 and <end_of_turn> 107)",
    },
}
# Gemma (v1): tokenizer_config.json (its own chat_template) and special_tokens_map.json from
# tokenizers/gemma, tokenizer.json from tokenizers/gemma2 (the assets have no Gemma v1 one; the
# vocabulary is the same, which gemmaTokenizerEvidence() checks). The tiny model is Gemma 2's: kiln
# compiles no GemmaForCausalLM, and the ids do not depend on the architecture.
kTokenizers["gemma"] = {
    **{k: kTokenizers["gemma2"][k] for k in ("architecture", "vocab_size", "config",
                                             "generation_config")},
    "dir": "tokenizers/gemma",
    "tokenizer_json_from": "tokenizers/gemma2",
    "vocab_note": "len(tokenizer) 256000 = the published Gemma (2b/7b) and Gemma 2 vocab_size, no "
                  "padding",
    "source": "Gemma 2's tiny model (the gemma2 entry's config and generation_config): kiln has no "
              "Gemma (v1) GemmaForCausalLM family; the prompt ids depend only on the tokenizer "
              "and the template",
}
# The Gemma (v1) expectations of the assets: the Gemma tokenizer of swift-transformers' tests
# (pcuenq/gemma-tokenizer).
kGemmaEncoded = "expected/swift-transformers/gemma_encoded.json"
kGemmaTokenizerTests = ("expected/swift-transformers/tokenizer_tests.json",
                        "pcuenq/gemma-tokenizer")
# The tokens Gemma's chat template writes (bos_token, the turn markers).
kGemmaTemplateTokens = ("<bos>", "<start_of_turn>", "<end_of_turn>")


def versions() -> dict:
    out = mlg.versions()
    out["jinja2"] = jinja2.__version__
    return out


def tinyConfig(info: dict, assets: str) -> tuple[dict, dict]:
    if "config_from_asset" in info:
        with open(os.path.join(assets, info["config_from_asset"])) as f:
            cfg = json.load(f)
        with open(os.path.join(assets, info["generation_config_from_asset"])) as f:
            gen = json.load(f)
        cfg.pop("transformers_version", None)
        gen.pop("transformers_version", None)
        gen.pop("_from_model_config", None)
        cfg["torch_dtype"] = "float32"
    else:
        cfg, gen = dict(info["config"]), dict(info["generation_config"])
    cfg.update(kTinyDims)
    cfg["vocab_size"] = info["vocab_size"]
    cfg = dict(sorted(cfg.items()))
    assert cfg["architectures"] == [info["architecture"]], cfg["architectures"]
    return cfg, gen


def gemmaTokenizerEvidence(assets: str, info: dict, raw: tokenizers.Tokenizer) -> dict:
    """Checks that tokenizer.json of info["tokenizer_json_from"] (`raw`) is the vocabulary of the
    tokenizer in info["dir"], which has none, and returns what was checked."""
    with open(os.path.join(assets, kGemmaEncoded)) as f:
        encoded = json.load(f)
    got = raw.encode(encoded["text"])  # add_special_tokens: the expectation starts with <bos> 2
    assert got.ids == encoded["token_ids"], f"{kGemmaEncoded}: token_ids differ"
    assert got.tokens[1:] == encoded["bpe_tokens"], f"{kGemmaEncoded}: bpe_tokens differ"
    assert raw.decode(got.ids, skip_special_tokens=False) == encoded["decoded_text"]
    testsPath, model = kGemmaTokenizerTests
    with open(os.path.join(assets, testsPath)) as f:
        tests = json.load(f)[model]
    for case in tests:
        caseIds = raw.encode(case["input"]).ids
        assert caseIds == case["encoded"]["input_ids"], f"{testsPath} {model}: {case['input']!r}"
        assert raw.decode(caseIds, skip_special_tokens=False) == case["decoded_with_special"]
        assert raw.decode(caseIds, skip_special_tokens=True) == case["decoded_without_special"]
    with open(os.path.join(assets, info["dir"], "tokenizer_config.json")) as f:
        declared = json.load(f)["added_tokens_decoder"]
    with open(os.path.join(assets, info["tokenizer_json_from"], "tokenizer.json")) as f:
        added = {str(t["id"]): t for t in json.load(f)["added_tokens"]}
    flags = ("content", "special", "lstrip", "rstrip", "normalized", "single_word")
    for i, token in declared.items():
        assert i in added and all(token[k] == added[i][k] for k in flags), (i, token, added.get(i))
    templateTokens = {t: raw.token_to_id(t) for t in kGemmaTemplateTokens}
    for t, i in templateTokens.items():
        assert declared[str(i)]["content"] == t, (t, i)
    assert raw.get_vocab_size(with_added_tokens=True) == info["vocab_size"]
    print(f"  {info['tokenizer_json_from']}/tokenizer.json: {kGemmaEncoded} "
          f"({len(encoded['token_ids'])} ids) and {len(tests)} {model} cases match; "
          f"added_tokens_decoder {sorted(map(int, declared))} the same tokens")
    return {
        kGemmaEncoded: f"text encoded (add_special_tokens=True) to its {len(encoded['token_ids'])}"
                       f" token_ids, its bpe_tokens and decoded_text exactly",
        f"{testsPath} [{model}]": f"all {len(tests)} cases: input_ids, decoded_with_special and "
                                  f"decoded_without_special exactly",
        "added_tokens_decoder": f"the ids {sorted(map(int, declared))} of {info['dir']}/"
                                f"tokenizer_config.json are the same tokens (content, special, "
                                f"lstrip, rstrip, normalized, single_word) in the "
                                f"{len(added)} added_tokens of tokenizer.json",
        "template_tokens": templateTokens,
        "vocab_size": raw.get_vocab_size(with_added_tokens=True),
    }


def tokenizerDirOf(name: str, info: dict, assets: str, scratch: str) -> str:
    """The directory AutoTokenizer loads: the assets' own, or for an entry with
    tokenizer_json_from a scratch one with that tokenizer.json and the config files of `dir`."""
    tokDir = os.path.join(assets, info["dir"])
    if "tokenizer_json_from" not in info:
        return tokDir
    assert not os.path.exists(os.path.join(tokDir, "tokenizer.json")), f"{tokDir} has one"
    out = os.path.join(scratch, f"{name}-tokenizer")
    os.makedirs(out)
    shutil.copyfile(os.path.join(assets, info["tokenizer_json_from"], "tokenizer.json"),
                    os.path.join(out, "tokenizer.json"))
    for fileName in ("tokenizer_config.json", "special_tokens_map.json"):
        shutil.copyfile(os.path.join(tokDir, fileName), os.path.join(out, fileName))
    return out


def ids(result) -> list[int]:
    # transformers 5 returns a BatchEncoding from apply_chat_template(tokenize=True); 4.x a list
    return list(result["input_ids"] if hasattr(result, "keys") else result)


def renderCase(tok, raw: tokenizers.Tokenizer, conv: str, messages: list[dict],
               tools: list[dict] | None) -> tuple[dict, bool]:
    """One conversation's text and ids; the bool says tokenizer.json's ids differ."""
    try:
        text = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                       tokenize=False)
        got = ids(tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                          tokenize=True))
    except Exception as e:  # jinja raise_exception in the template: recorded, not fatal
        print(f"  {conv}: template raised {type(e).__name__}: {e}; skipped")
        return {"conversation": conv, "skipped": f"{type(e).__name__}: {e}"}, False
    case = {"conversation": conv, "text": text, "ids": got}
    plain = raw.encode(text, add_special_tokens=False).ids
    differs = plain != got
    if differs:
        case["tokenizer_json_ids"] = plain
        first = next(i for i, (a, b) in enumerate(zip(plain + [-1], got + [-1])) if a != b)
        print(f"  {conv}: AutoTokenizer and tokenizer.json differ from id {first}: "
              f"{tok.convert_ids_to_tokens(got[first:first + 3])} vs "
              f"{[raw.id_to_token(i) for i in plain[first:first + 3]]}")
    print(f"  {conv}: {len(got)} ids, text {text!r}")
    return case, differs


def renderCases(name: str, tok, raw: tokenizers.Tokenizer) -> tuple[list[dict], list[dict], bool]:
    """The plain conversations' cases, the tool conversations' cases (empty for a tokenizer not in
    kToolTokenizers), and whether tokenizer.json's ids differ anywhere."""
    cases, toolCases, anyDiff = [], [], False
    for conv, messages in kConversations.items():
        case, differs = renderCase(tok, raw, conv, messages, None)
        cases.append(case)
        anyDiff |= differs
    if name in kToolTokenizers:
        for conv, conversation in kToolConversations.items():
            case, differs = renderCase(tok, raw, conv, conversation["messages"],
                                       conversation["tools"])
            assert '{"type": "function", "function": {"name": "get_weather"' in case["text"], \
                f"{name}: the tool is not printed in the order given"
            toolCases.append(case)
            anyDiff |= differs
    return cases, toolCases, anyDiff


def checkTinyModel(name: str, cfg: dict, gen: dict, cases: list[dict], modelDir: str) -> dict:
    """Builds the tiny model from the description, runs every prompt through it and returns the
    tensor shapes its checkpoint holds."""
    os.makedirs(modelDir, exist_ok=True)
    with open(os.path.join(modelDir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(modelDir, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(modelDir),
                                             dtype=torch.float32).eval()
    fx.initWeights(model, seed=3000)
    assert type(model).__name__ == cfg["architectures"][0], type(model).__name__
    model.save_pretrained(modelDir, safe_serialization=True)
    shapes = {k: list(v.shape) for k, v in sorted(model.state_dict().items())}
    if cfg.get("tie_word_embeddings"):
        shapes.pop("lm_head.weight", None)  # tied: the checkpoint stores only the embedding
    loaded = AutoModelForCausalLM.from_pretrained(modelDir, dtype=torch.float32).eval()
    for case in cases:
        if "ids" not in case:
            continue
        with torch.no_grad():
            logits = loaded(torch.tensor([case["ids"]])).logits
        assert logits.shape == (1, len(case["ids"]), cfg["vocab_size"]), logits.shape
        assert bool(torch.isfinite(logits).all())
    size = sum(os.path.getsize(os.path.join(modelDir, f)) for f in os.listdir(modelDir))
    print(f"  tiny {cfg['architectures'][0]}: vocab {cfg['vocab_size']}, {size} bytes on disk, "
          f"ran {sum('ids' in c for c in cases)} prompts")
    return {"tensors": shapes, "f32_checkpoint_bytes": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default=os.getcwd(), help="kiln repo root (default: cwd)")
    parser.add_argument("--assets", default=os.environ.get("KILN_ASSETS_DIR",
                                                           "/work/shared/assets"))
    parser.add_argument("--write-models", metavar="DIR",
                        help="keep the tiny models under DIR/<tokenizer> (never in the repo)")
    parser.add_argument("--only", action="append", choices=sorted(kTokenizers), metavar="NAME",
                        help="regenerate only this tokenizer's entry (repeatable); the others "
                             "are kept as the file has them")
    args = parser.parse_args()
    path = os.path.join(args.repo, "tests/data/golden/chat_prompt_ids.json")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    scratch = tempfile.mkdtemp(prefix="kiln-chat-tiny-")
    out = {
        "generator": "tools/goldens/make_chat_prompt_goldens.py",
        "versions": versions(),
        "call": "AutoTokenizer.from_pretrained(dir).apply_chat_template(messages, "
                "add_generation_prompt=True, tokenize=True); text: the same with tokenize=False",
        "conversations": kConversations,
        "call_with_tools": "tool_cases: the same with tools=tool_conversations[c]['tools']",
        "tool_conversations": kToolConversations,
        "tokenizer_json_ids_note": (
            "present only where the installed transformers' ids differ from tokenizer.json run "
            "as written by the tokenizers library on the rendered text (add_special_tokens="
            "False). Phi-3-mini: transformers 5 loads it as LlamaTokenizer, which rebuilds the "
            "pipeline without the Prepend('\u2581') normalizer of tokenizer.json, so text right "
            "after a special token gets no leading '\u2581' ('You' 3492 instead of '\u2581You' "
            "887). transformers 4.57.6 (LlamaTokenizerFast) gives tokenizer_json_ids (checked "
            "once by hand, not by this script)."),
        "tiny_model_note": (
            "no weights are committed: a test writes config.json / generation_config.json as "
            "given and generates the tensors listed (any seeded random values, e.g. N(0, 0.15) "
            "and norm weights 1 + N(0, 0.1), F32). The generator built each one in a temporary "
            "directory and ran every prompt of its tokenizer through it."),
        "tokenizers": {},
    }
    kept = {}
    if args.only:
        with open(path) as f:
            existing = json.load(f)
        for key, value in out.items():
            if key != "tokenizers" and existing.get(key) != value:
                sys.exit(f"--only: {path}'s {key!r} is not what this run writes; "
                         f"run without --only")
        kept = existing["tokenizers"]
    try:
        for name, info in kTokenizers.items():
            if args.only and name not in args.only:
                if name in kept:
                    out["tokenizers"][name] = kept[name]
                continue
            tokDir = tokenizerDirOf(name, info, args.assets, scratch)
            tok = AutoTokenizer.from_pretrained(tokDir)
            if "chat_template" in info:
                assert not tok.chat_template, f"{name}: {tokDir} has its own chat_template"
                with open(os.path.join(args.assets, info["chat_template"])) as f:
                    tok.chat_template = f.read()
            raw = tokenizers.Tokenizer.from_file(os.path.join(tokDir, "tokenizer.json"))
            print(f"{name}: {type(tok).__name__}, len {len(tok)}, bos {tok.bos_token_id}, "
                  f"eos {tok.eos_token_id}")
            evidence = (gemmaTokenizerEvidence(args.assets, info, raw)
                        if "tokenizer_json_from" in info else None)
            cases, toolCases, anyDiff = renderCases(name, tok, raw)
            assert info["vocab_size"] >= len(tok), (info["vocab_size"], len(tok))
            cfg, gen = tinyConfig(info, args.assets)
            base = args.write_models or scratch
            tiny = checkTinyModel(name, cfg, gen, cases + toolCases, os.path.join(base, name))
            out["tokenizers"][name] = {
                "dir": f"shared:{info['dir']}",
                **({"tokenizer_json_from": f"shared:{info['tokenizer_json_from']}",
                    "tokenizer_json_note": (
                        f"{info['dir']} has no tokenizer.json: the tokenizer loaded is "
                        f"{info['tokenizer_json_from']}/tokenizer.json with {info['dir']}'s "
                        f"tokenizer_config.json (its chat_template) and special_tokens_map.json; "
                        f"a test assembles the same directory"),
                    "tokenizer_json_evidence": evidence}
                   if "tokenizer_json_from" in info else {}),
                **({"chat_template": f"shared:{info['chat_template']}"}
                   if "chat_template" in info else {}),
                "tokenizer_class": type(tok).__name__,
                "len_tokenizer": len(tok),
                "bos_token": tok.bos_token, "bos_token_id": tok.bos_token_id,
                "eos_token": tok.eos_token, "eos_token_id": tok.eos_token_id,
                "tokenizer_json_agrees": not anyDiff,
                "cases": cases,
                **({"tool_cases": toolCases} if toolCases else {}),
                "tiny_model": {"vocab_note": info["vocab_note"], "source": info["source"],
                               "config": cfg, "generation_config": gen, **tiny},
            }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    mlg.writeGoldenJson(path, out)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
