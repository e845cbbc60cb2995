#!/usr/bin/env python3
"""Text-pair tokenizer goldens for tests/runtime/text: tests/data/golden/tokenizer_pairs.json.

For each tokenizer below and each pair in PAIRS this records HF's
    tokenizer([text], [text_pair], add_special_tokens=True / False, return_token_type_ids=True)
as input_ids / token_type_ids and input_ids_plain / token_type_ids_plain. A directory with a
tokenizer_config.json goes through transformers' AutoTokenizer (which rebuilds the post-processor
of Llama/Gemma-class tokenizers from add_bos_token / add_eos_token); one with only tokenizer.json
through tokenizers.Tokenizer.from_file(...).encode(text, text_pair, add_special_tokens=...).ids /
.type_ids. "config_patch" is merged into tokenizer_config.json first (to exercise the
add_bos_token / add_eos_token rebuild). The tokenizers cover every post-processor kiln reads:
TemplateProcessing (BERT, XLM-R, Llama-2, Gemma, Mistral, Phi-3), RobertaProcessing (RoBERTa,
BART), Sequence [ByteLevel, TemplateProcessing] (Llama-3.2), ByteLevel alone (Qwen2.5) and none.

The batch form on purpose: transformers' one-pair call tokenizer(text, "") drops an empty
text_pair (its `if text_pair` test) and encodes text alone, while the batch call and `tokenizers`
keep it as an empty second sequence ([CLS] A [SEP] [SEP]); kiln's encodePair does the latter.
The texts hold no special-token strings that only tokenizer_config.json names (XLM-R's <pad>):
transformers adds those to the vocabulary as special tokens, which is single-text behaviour that
these goldens do not check.

Versions: kiln matches tokenizers 0.22.x as transformers 4.57.x uses it (see
make_tokenizer_goldens.py, whose environment this script uses; transformers 5 gives other ids for
Llama-2-style tokenizers and ignores a config's add_eos_token there):
    python3 -m venv /tmp/kiln-tok-goldens
    /tmp/kiln-tok-goldens/bin/pip install transformers==4.57.1     # pulls tokenizers 0.22.x
    /tmp/kiln-tok-goldens/bin/python tools/goldens/make_tokenizer_pair_goldens.py [--assets DIR]
"""
import argparse
import json
import os
import platform
import shutil
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(REPO, "tests", "data", "golden", "tokenizer_pairs.json")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PAIRS = [
    ["How do embeddings work?", "Encoders turn every sentence into vectors."],
    ["Hello world", "How are you?"],
    ["", "Only the second text."],
    ["Only the first text.", ""],
    ["Café au lait, naïve façade", "déjà vu 😀 in 東京"],
    ["Special [SEP] and </s> written <s> in text", "[CLS] more </s> specials"],
    ["  leading and  double spaces", "trailing\ttab\n"],
]

# (name, root, dir, config_patch): root "data" is tests/data, "assets" the shared assets.
TOKENIZERS = [
    ("bert-cased", "data", "tokenizer/encoders/bert-cased", None),
    ("bert-uncased-no-post-processor", "data", "tokenizer/encoders/bert-uncased", None),
    ("roberta-bpe", "data", "tokenizer/encoders/roberta-bpe", None),
    ("xlmr-unigram", "data", "tokenizer/encoders/xlmr-unigram", None),
    ("unigram-byte-fallback", "data", "tokenizer/encoders/unigram-byte-fallback", None),
    ("tiny-bert", "data", "models/tiny-bert", None),
    ("tiny-xlm-roberta", "data", "models/tiny-xlm-roberta", None),
    ("tiny-bart", "data", "models/tiny-bart", None),
    ("llama2", "assets", "tokenizers/llama2", None),
    ("llama2-add-eos", "assets", "tokenizers/llama2", {"add_eos_token": True}),
    ("llama2-eos-only", "assets", "tokenizers/llama2",
     {"add_bos_token": False, "add_eos_token": True}),
    ("gemma2", "assets", "tokenizers/gemma2", None),
    ("mistral", "assets", "tokenizers/mistral-7b-instruct-v0.3", None),
    ("phi3", "assets", "tokenizers/phi3-mini", None),
    ("llama3.2", "assets", "tokenizers/llama3.2", None),
    ("qwen2.5", "assets", "tokenizers/qwen2.5", None),
]


def stage(src, patch, workdir):
    """A copy of the tokenizer files of src with config_patch merged into tokenizer_config.json."""
    dst = os.path.join(workdir, "tok")
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    for name in ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]:
        if os.path.exists(os.path.join(src, name)):
            shutil.copy(os.path.join(src, name), dst)
    if patch:
        path = os.path.join(dst, "tokenizer_config.json")
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        config.update(patch)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(config, f)
    return dst


def encoder_for(directory, keep_tokenizer_json):
    """A function (text, pair, add_special_tokens) -> (ids, type_ids), and what it calls.

    keep_tokenizer_json passes add_prefix_space=None, which keeps transformers on tokenizer.json
    (as make_tokenizer_goldens.py does: Mistral's config would otherwise make it convert the
    sentencepiece model instead)."""
    if os.path.exists(os.path.join(directory, "tokenizer_config.json")):
        from transformers import AutoTokenizer

        kwargs = {"add_prefix_space": None} if keep_tokenizer_json else {}
        tok = AutoTokenizer.from_pretrained(directory, **kwargs)
        assert tok.is_fast, directory

        def encode(text, pair, add):
            out = tok([text], [pair], add_special_tokens=add, return_token_type_ids=True)
            return out["input_ids"][0], out["token_type_ids"][0]

        return encode, "AutoTokenizer(dir)([text], [text_pair], add_special_tokens=..., " \
                       "return_token_type_ids=True) [%s]" % type(tok).__name__
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))

    def encode(text, pair, add):
        e = tok.encode(text, pair, add_special_tokens=add)
        return e.ids, e.type_ids

    return encode, "tokenizers.Tokenizer.from_file(dir/tokenizer.json).encode(text, text_pair, " \
                   "add_special_tokens=...)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--assets", default=os.path.join(REPO, "..", "shared", "assets"))
    args = ap.parse_args()
    import tokenizers
    import transformers

    if not tokenizers.__version__.startswith("0.22.") or transformers.__version__ != "4.57.1":
        sys.exit("needs tokenizers 0.22.x and transformers 4.57.1 (see the docstring), "
                 "found %s / %s" % (tokenizers.__version__, transformers.__version__))
    roots = {"data": os.path.join(REPO, "tests", "data"), "assets": args.assets}
    entries = []
    with tempfile.TemporaryDirectory() as work:
        for name, root, rel, patch in TOKENIZERS:
            staged = stage(os.path.join(roots[root], rel), patch, work)
            encode, call = encoder_for(staged, keep_tokenizer_json=root == "assets")
            cases = []
            for text, pair in PAIRS:
                ids, types = encode(text, pair, True)
                plain_ids, plain_types = encode(text, pair, False)
                cases.append({"text": text, "text_pair": pair, "input_ids": ids,
                              "token_type_ids": types, "input_ids_plain": plain_ids,
                              "token_type_ids_plain": plain_types})
            entry = {"name": name, "root": root, "dir": rel, "call": call, "cases": cases}
            if patch:
                entry["config_patch"] = patch
            entries.append(entry)
    golden = {
        "generator": "tools/goldens/make_tokenizer_pair_goldens.py",
        "note": "input_ids / token_type_ids: the call with add_special_tokens=True; *_plain: "
                "add_special_tokens=False. root 'data' is tests/data, 'assets' the shared assets.",
        "versions": {"tokenizers": tokenizers.__version__,
                     "transformers": transformers.__version__,
                     "python": platform.python_version()},
        "tokenizers": entries,
    }
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print("wrote", os.path.relpath(OUT, REPO), "(%d tokenizers)" % len(entries))


if __name__ == "__main__":
    main()
