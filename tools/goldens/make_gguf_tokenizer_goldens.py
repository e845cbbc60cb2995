#!/usr/bin/env python3
"""GGUF tokenizer goldens for tests/compiler/import/gguf_tokenizer_test.cc.

Writes two things (run from anywhere; paths are relative to the repository):
  tests/data/gguf/stories260k-tokenizer.gguf   a tokenizer-only GGUF (no tensors) holding the
      stories260K sentencepiece vocabulary (512 tokens, from the llama2.c file
      $KILN_ASSETS_DIR/models/stories260K-llama2c/tok512.bin) the way llama.cpp's convert script
      writes a sentencepiece vocabulary: tokenizer.ggml.model "llama", pre "default", tokens,
      scores, token_type (unknown/control/byte/normal), bos 1, eos 2, unk 0, add_bos_token true,
      add_eos_token false, add_space_prefix true, and a chat template.
  tests/data/golden/gguf_tokenizer_ids.json     for every case (tests/data/tokenizer/corpus.txt plus
      EXTRA_CASES) and both GGUFs (the fixture above and SmolLM2-135M-Instruct.Q4_1.gguf, a
      tokenizer.ggml.model "gpt2" / pre "smollm" file), the ids transformers' own GGUF tokenizer
      gives: AutoTokenizer.from_pretrained(dir, gguf_file=name).encode(text,
      add_special_tokens=False / True).

SmolLM2's GGUF is looked up at $KILN_SMOLLM2_GGUF, else
${KILN_MODEL_CACHE:-${XDG_CACHE_HOME:-~/.cache}/kiln/models}/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
(scripts/fetch-smollm2.sh puts it there).

Cross-checks (asserted, not written): the fixture's ids equal those of the HF tokenizer.json of
the same vocabulary ($KILN_ASSETS_DIR/models/stories260K-hf, when the assets are present) except
at a leading space or after a special token (that file's legacy prefix-space normalizer), and
SmolLM2's ids do not change when the pre-tokenizer is the one of SmolLM2's own tokenizer.json
(Digits(individual_digits) + ByteLevel, which kiln writes for pre "smollm") instead of the plain
ByteLevel transformers uses.

  --check-json DIR   also load DIR/<model>.tokenizer.json (what kiln's convertGgufTokenizer wrote;
                     gguf_tokenizer_test writes them when $KILN_GGUF_TOKENIZER_DUMP_DIR is set)
                     with HF tokenizers.Tokenizer.from_str and compare its ids with the goldens.

    /opt/kiln-venv/bin/python tools/goldens/make_gguf_tokenizer_goldens.py [--assets DIR]
"""
import argparse
import hashlib
import json
import os
import platform
import struct
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tokenizer_goldens import read_corpus  # noqa: E402

FIXTURE = os.path.join(REPO, "tests", "data", "gguf", "stories260k-tokenizer.gguf")
GOLDEN = os.path.join(REPO, "tests", "data", "golden", "gguf_tokenizer_ids.json")
SMOLLM2_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

# A Llama-2-chat style template, so the fixture carries tokenizer.chat_template as real files do.
FIXTURE_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}"
    "{{ ' ' + message['content'] + eos_token }}{% endif %}{% endfor %}"
)

# Cases beyond the shared corpus: digits (SmolLM2 splits every digit), leading/trailing spaces
# (the sentencepiece prefix space), special tokens of both vocabularies next to text and each other.
EXTRA_CASES = [
    "12345 1,234.56 0.5 -7 x2 2x 3d 10000000000",
    "phone: +1 (555) 010-9999, year 2024, v1.2.3",
    " leading space",
    "   three leading spaces",
    "trailing space ",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_end|><|im_start|><|endoftext|>",
    "<repo_name>kiln<file_sep>main.cc<filename>x<gh_stars>10",
    "<s>[INST] Tell me a story. [/INST] Once upon a time</s>",
    "<s> <s>  </s>x</s> y",
    "<unk><unk> and <0x41> written out",
    "Lily and Ben went to the park. They saw a big dog! \"Woof,\" said the dog.",
    "\u2581already has the metaspace \u2581 char",
    "tab\tand\u3000ideographic space",
]


def cache_path():
    env = os.environ.get("KILN_SMOLLM2_GGUF")
    if env:
        return env
    cache = os.environ.get("KILN_MODEL_CACHE")
    if not cache:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        cache = os.path.join(xdg, "kiln", "models")
    return os.path.join(cache, "smollm2", SMOLLM2_NAME)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def read_llama2c_tokenizer(path):
    """llama2.c's tokenizer file: int32 max_token_length, then per token float32 score, int32
    length, bytes. Its exporter wrote U+2581 as ' ' and bos/eos as '\\n<s>\\n' / '\\n</s>\\n'."""
    with open(path, "rb") as f:
        data = f.read()
    offset, tokens, scores = 4, [], []
    while offset < len(data):
        score, length = struct.unpack_from("<fi", data, offset)
        offset += 8
        tokens.append(data[offset:offset + length].decode("utf-8").replace(" ", "\u2581"))
        scores.append(score)
        offset += length
    tokens[1], tokens[2] = "<s>", "</s>"
    return tokens, scores


def write_fixture(assets):
    import gguf

    tokens, scores = read_llama2c_tokenizer(
        os.path.join(assets, "models", "stories260K-llama2c", "tok512.bin"))
    types = [gguf.TokenType.NORMAL] * len(tokens)
    types[0] = gguf.TokenType.UNKNOWN
    types[1] = types[2] = gguf.TokenType.CONTROL
    for i in range(3, 259):
        assert tokens[i] == f"<0x{i - 3:02X}>", tokens[i]
        types[i] = gguf.TokenType.BYTE
    os.makedirs(os.path.dirname(FIXTURE), exist_ok=True)
    w = gguf.GGUFWriter(FIXTURE, "llama")
    w.add_name("stories260K tokenizer")
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    w.add_chat_template(FIXTURE_CHAT_TEMPLATE)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"fixture: {os.path.relpath(FIXTURE, REPO)} ({os.path.getsize(FIXTURE)} bytes)")


def load_gguf_tokenizer(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))


def encode_cases(tok, cases):
    return [{"text": t, "ids": tok.encode(t, add_special_tokens=False),
             "ids_special": tok.encode(t, add_special_tokens=True)} for t in cases]


def metadata(path):
    import gguf

    reader = gguf.GGUFReader(path)
    get = lambda key: reader.fields[key].contents() if key in reader.fields else None
    return {key: get("tokenizer.ggml." + key) for key in
            ["model", "pre", "bos_token_id", "eos_token_id", "unknown_token_id",
             "padding_token_id", "add_bos_token", "add_eos_token"]} | {
                "chat_template": get("tokenizer.chat_template")}


def check_smollm_digits(tok, entries):
    """SmolLM2's tokenizer.json splits digits before ByteLevel; transformers' GGUF loader does
    not. Its merges contain no digit, so both give the same ids: assert it on every case."""
    from tokenizers import Tokenizer, pre_tokenizers

    backend = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    for e in entries:
        got = backend.encode(e["text"], add_special_tokens=False).ids
        assert got == e["ids"], (e["text"], got, e["ids"])
    print("smollm2: Digits+ByteLevel pre-tokenizer gives the same ids on every case")


def check_stories_hf(assets, entries):
    from tokenizers import Tokenizer

    path = os.path.join(assets, "models", "stories260K-hf", "tokenizer.json")
    if not os.path.exists(path):
        print("stories260k: no HF tokenizer.json in the assets; cross-check skipped")
        return
    hf = Tokenizer.from_file(path)
    diffs = [e["text"] for e in entries
             if hf.encode(e["text"], add_special_tokens=False).ids != e["ids"]]
    # That file is the legacy Llama-2 layout (Prepend + Replace normalizer, no pre-tokenizer):
    # it adds a prefix space to text that starts with a space and after special tokens, where
    # transformers' GGUF tokenizer (Metaspace, prepend_scheme "first") does not. Only such
    # cases may differ.
    unexplained = [t for t in diffs if not (t.startswith(" ") or t.startswith("<") or
                                            t.startswith("\u2581") or "\n" in t)]
    assert not unexplained, unexplained
    print(f"stories260k: HF tokenizer.json of the same vocab differs on {len(diffs)} of "
          f"{len(entries)} cases, all at a leading space or after a special token")


def check_kiln_json(directory, out):
    from tokenizers import Tokenizer

    for name, model in out["models"].items():
        path = os.path.join(directory, f"{name}.tokenizer.json")
        with open(path, encoding="utf-8") as f:
            tok = Tokenizer.from_str(f.read())
        bad = 0
        for c in model["cases"]:
            for key, special in [("ids", False), ("ids_special", True)]:
                got = tok.encode(c["text"], add_special_tokens=special).ids
                if got != c[key]:
                    bad += 1
                    print(f"  {name} {key} {c['text']!r}: {got} != {c[key]}")
        print(f"{name}: HF tokenizers loads kiln's tokenizer.json; {bad} mismatches over "
              f"{2 * len(model['cases'])} encodes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--assets", default=os.environ.get(
        "KILN_ASSETS_DIR", os.path.join(REPO, "..", "shared", "assets")))
    ap.add_argument("--check-json", metavar="DIR")
    args = ap.parse_args()
    import gguf
    import tokenizers
    import transformers

    smollm2 = cache_path()
    if not os.path.exists(smollm2):
        sys.exit(f"{smollm2} not found: run scripts/fetch-smollm2.sh or set KILN_SMOLLM2_GGUF")
    write_fixture(args.assets)
    cases = read_corpus() + EXTRA_CASES
    out = {
        "generator": "tools/goldens/make_gguf_tokenizer_goldens.py",
        "reference": "transformers AutoTokenizer.from_pretrained(dir, gguf_file=name).encode",
        "versions": {"python": platform.python_version(), "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__, "gguf": _dist_version("gguf")},
        "models": {},
    }
    for name, path, source in [
            ("smollm2", smollm2, "smollm2/" + SMOLLM2_NAME + " (scripts/fetch-smollm2.sh)"),
            ("stories260k", FIXTURE, os.path.relpath(FIXTURE, REPO))]:
        tok = load_gguf_tokenizer(path)
        entries = encode_cases(tok, cases)
        out["models"][name] = {
            "gguf": source, "gguf_sha256": sha256(path), "metadata": metadata(path),
            "tokenizer_class": type(tok).__name__, "cases": entries}
        if name == "smollm2":
            check_smollm_digits(tok, entries)
        else:
            check_stories_hf(args.assets, entries)
        print(f"{name}: {len(entries)} cases")
    os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
    with open(GOLDEN, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"goldens: {os.path.relpath(GOLDEN, REPO)}")
    if args.check_json:
        check_kiln_json(args.check_json, out)


def _dist_version(name):
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    main()
