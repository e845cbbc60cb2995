"""The tokenizer.json that `kiln compile MODEL.gguf` writes into the artifact loads in Hugging Face
`tokenizers` and gives transformers' ids: SmolLM2-135M-Instruct (scripts/fetch-smollm2.sh) is
compiled, its artifact's tokenizer.json is read with tokenizers.Tokenizer.from_file, and every
case of tests/data/golden/gguf_tokenizer_ids.json (transformers' own GGUF tokenizer, written by
tools/goldens/make_gguf_tokenizer_goldens.py) must encode to the golden ids, with and without
special tokens; tokenizer_config.json's chat template must be the GGUF's.

Usage: gguf_tokenizer_hf_test.py KILN REPO WORKDIR. Exit 77 (skip) when `tokenizers` or the
cached GGUF is missing, except under CI=true, where that fails.
"""
import json
import os
import subprocess
import sys


def onCi():
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def skip(why):
    print(("FAIL (CI): " if onCi() else "skip: ") + why)
    sys.exit(1 if onCi() else 77)


def smolPath():
    if os.environ.get("KILN_SMOLLM2_GGUF"):
        return os.environ["KILN_SMOLLM2_GGUF"]
    cache = os.environ.get("KILN_MODEL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kiln", "models")
    return os.path.join(cache, "smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")


def main():
    kiln, repo, work = sys.argv[1:4]
    try:
        import tokenizers
    except ImportError:
        skip("the test venv has no `tokenizers`; run scripts/python-test-deps.sh")
    gguf = smolPath()
    if not os.path.exists(gguf):
        skip(f"{gguf} is absent; run scripts/fetch-smollm2.sh")
    artifact = os.path.join(work, "smollm2-tokenizer.kiln")
    subprocess.run([kiln, "compile", gguf, "-o", artifact, "--max-batch", "1", "--max-seq-len",
                    "64", "--quiet"], check=True)
    with open(os.path.join(repo, "tests/data/golden/gguf_tokenizer_ids.json")) as f:
        golden = json.load(f)["models"]["smollm2"]
    tok = tokenizers.Tokenizer.from_file(os.path.join(artifact, "tokenizer.json"))
    failures = 0
    for case in golden["cases"]:
        for special, key in ((False, "ids"), (True, "ids_special")):
            ids = tok.encode(case["text"], add_special_tokens=special).ids
            if ids != case[key]:
                failures += 1
                print(f"MISMATCH {key} {case['text']!r}: tokenizers {ids}, transformers {case[key]}")
    with open(os.path.join(artifact, "tokenizer_config.json")) as f:
        config = json.load(f)
    if config.get("chat_template") != golden["metadata"]["chat_template"]:
        failures += 1
        print("MISMATCH chat_template")
    print(f"tokenizers {tokenizers.__version__}: {2 * len(golden['cases'])} encodes, "
          f"{failures} mismatches")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
