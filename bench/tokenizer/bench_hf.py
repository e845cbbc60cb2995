"""HF tokenizers single-thread encode of the same documents as bench_tokenizer.cc.

Usage: RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false python bench_hf.py TOKENIZER_DIR GOLDENS_JSON [MB] [REPEATS]
Calls Tokenizer.encode once per document (never encode_batch) and prints one JSON line.
"""
import json
import os
import sys
import time

from tokenizers import Tokenizer
import tokenizers


def make_docs(goldens, target_bytes):
    block = "".join(c["text"] + "\n" for c in goldens["cases"]).encode("utf-8")
    docs, doc, total = [], bytearray(), 0
    while total < target_bytes:
        pos = 0
        while pos < len(block):
            nl = block.find(b"\n", pos)
            end = len(block) if nl < 0 else nl + 1
            doc += block[pos:end]
            pos = end
            if len(doc) >= 4096:
                total += len(doc)
                docs.append(bytes(doc).decode("utf-8"))
                doc = bytearray()
    return docs


def main():
    assert os.environ.get("RAYON_NUM_THREADS") == "1" and os.environ.get("TOKENIZERS_PARALLELISM") == "false"
    tok_dir, goldens_path = sys.argv[1], sys.argv[2]
    megabytes = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
    repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    t0 = time.perf_counter()
    tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    load = time.perf_counter() - t0
    with open(goldens_path, encoding="utf-8") as f:
        docs = make_docs(json.load(f), int(megabytes * 1e6))
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    best, tokens, checksum = 1e30, 0, 0
    for _ in range(repeats):
        tokens, checksum = 0, 0
        start = time.perf_counter()
        all_ids = [tok.encode(d, add_special_tokens=False).ids for d in docs]
        best = min(best, time.perf_counter() - start)
    for ids in all_ids:
        tokens += len(ids)
        for i in ids:
            checksum = (checksum * 1000003 + i) & 0xFFFFFFFFFFFFFFFF
    print(json.dumps({"impl": "hf-tokenizers " + tokenizers.__version__, "bytes": nbytes, "docs": len(docs),
                      "tokens": tokens, "checksum": checksum, "seconds": round(best, 4),
                      "mb_per_s": round(nbytes / best / 1e6, 2), "load_seconds": round(load, 3)}))


if __name__ == "__main__":
    main()
