#!/usr/bin/env python3
"""Tokenizer goldens for tests/runtime/text: tests/data/tokenizer/goldens_<family>.json.

For every case of tests/data/tokenizer/corpus.txt and every tokenizer family in the shared assets
(plus TinyStories-656K and stories260K) this records, from the reference implementations:
  ids          tokenizers.Tokenizer.encode(text, add_special_tokens=False).ids
  ids_special  transformers AutoTokenizer(...).encode(text, add_special_tokens=True)
               (transformers applies tokenizer_config's add_bos_token/add_eos_token to
               Llama/Gemma-class tokenizers)
  decode_plain     Tokenizer.decode(ids, skip_special_tokens=False)
  decode_special   Tokenizer.decode(ids_special, skip_special_tokens=False)
  decode_skip      Tokenizer.decode(ids_special, skip_special_tokens=True)

Versions: kiln matches `tokenizers` 0.22.x as used by transformers 4.57.x, the stack behind the
llama.cpp and swift-transformers vectors in the assets. Newer releases differ on purpose or by
accident: tokenizers 0.23 decodes added tokens with normalized=true (Llama-2's <s>) through their
normalized form and no longer skips them with skip_special_tokens; transformers 5 rebuilds Llama
tokenizers' normalizer instead of using tokenizer.json. So this script refuses other versions.
Make the environment once:
    python3 -m venv /tmp/kiln-tok-goldens
    /tmp/kiln-tok-goldens/bin/pip install transformers==4.57.1     # pulls tokenizers 0.22.x
    /tmp/kiln-tok-goldens/bin/python tools/goldens/make_tokenizer_goldens.py [--assets DIR]

The llama2 tokenizer.json in the assets once had U+00A0 replaced by ASCII spaces (HF could not
load it); the assets now hold the repaired file, which this script and the tests read as it is.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_DIR = os.path.join(REPO, "tests", "data", "tokenizer")

FAMILIES = {
    "gpt2": "tokenizers/gpt2",
    "llama2": "tokenizers/llama2",
    "llama3": "tokenizers/llama3",
    "llama3.2": "tokenizers/llama3.2",
    "qwen2.5": "tokenizers/qwen2.5",
    "phi3": "tokenizers/phi3-mini",
    "mistral": "tokenizers/mistral-7b-instruct-v0.3",
    "gemma2": "tokenizers/gemma2",
    "tinystories": "models/tinystories-656K-hf",
    "stories260k": "models/stories260K-hf",
}


def unescape(line):
    def repl(m):
        s = m.group(0)
        if s.startswith("\\u{"):
            return chr(int(m.group(1), 16)) if m.group(1) else ""
        return {"\\n": "\n", "\\r": "\r", "\\t": "\t", "\\\\": "\\"}[s]

    return re.sub(r"\\u\{([0-9A-Fa-f]*)\}|\\n|\\r|\\t|\\\\", repl, line)


def read_corpus():
    cases = []
    with open(os.path.join(OUT_DIR, "corpus.txt"), encoding="utf-8", newline="\n") as f:
        for raw in f.read().split("\n"):
            if raw.startswith("#") or raw == "":
                continue
            cases.append(unescape(raw))
    return cases


def stage(assets, family, workdir):
    """Copies a family's files into workdir and returns the directory."""
    src = os.path.join(assets, FAMILIES[family])
    dst = os.path.join(workdir, family)
    os.makedirs(dst)
    for name in ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]:
        if os.path.exists(os.path.join(src, name)):
            shutil.copy(os.path.join(src, name), dst)
    return src, dst


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--assets", default=os.path.join(REPO, "..", "shared", "assets"))
    args = ap.parse_args()
    import tokenizers
    import transformers
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    if not tokenizers.__version__.startswith("0.22.") or not transformers.__version__.startswith("4.57."):
        sys.exit(f"need tokenizers 0.22.x + transformers 4.57.x, found {tokenizers.__version__} / "
                 f"{transformers.__version__}; see this script's docstring")
    cases = read_corpus()
    with tempfile.TemporaryDirectory() as work:
        for family in FAMILIES:
            src, d = stage(args.assets, family, work)
            tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
            # add_prefix_space=None keeps transformers on tokenizer.json (Mistral's config would
            # otherwise make it convert the sentencepiece model instead).
            auto = AutoTokenizer.from_pretrained(d, add_prefix_space=None)
            assert auto.is_fast, family
            entries = []
            for text in cases:
                ids = tok.encode(text, add_special_tokens=False).ids
                ids_special = auto.encode(text, add_special_tokens=True)
                entries.append({
                    "text": text,
                    "ids": ids,
                    "ids_special": ids_special,
                    "decode_plain": tok.decode(ids, skip_special_tokens=False),
                    "decode_special": tok.decode(ids_special, skip_special_tokens=False),
                    "decode_skip": tok.decode(ids_special, skip_special_tokens=True),
                })
            out = {
                "family": family,
                "source": FAMILIES[family],
                "tokenizer_json_sha256": sha256(os.path.join(src, "tokenizer.json")),
                "tokenizers_version": tokenizers.__version__,
                "transformers_version": transformers.__version__,
                "tokenizer_class": type(auto).__name__,
                "cases": entries,
            }
            path = os.path.join(OUT_DIR, f"goldens_{family}.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(out, f, ensure_ascii=False, indent=None, separators=(",", ":"))
                f.write("\n")
            print(f"{family}: {len(entries)} cases -> {os.path.relpath(path, REPO)}")


if __name__ == "__main__":
    main()
