#!/usr/bin/env python3
"""Writes the copies the CPU benchmark's peers need of a model made by make_random_llama.py
(--dtype fp32; no tokenizer there, and kiln compiles that directory as it is):

    random_llama_peers.py MODEL_DIR --gguf OUT.gguf --vllm-dir OUT_DIR

- OUT.gguf, for llama.cpp: the same fp32 values in GGUF's llama layout (tensor names of
  llama.cpp's convert_hf_to_gguf.py, q and k rows permuted as it permutes them: GGUF's llama rope
  rotates adjacent dimensions, transformers' rotates halves), file type F32, and a SentencePiece-
  style vocabulary of <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF> and t<id> for the rest
  (llama.cpp wants one to load the model; the benchmarks feed token ids).
- OUT_DIR, for vLLM: MODEL_DIR's files linked, plus a WordLevel tokenizer.json over the same
  strings and a tokenizer_config.json (vLLM reads the vocabulary size from the tokenizer).

So kiln, llama.cpp and vLLM multiply the same values. Needs numpy and gguf (PyPI `gguf`,
llama.cpp's gguf-py; tools/bench/vllm_cpu_peer.py's venv has both).
"""

import argparse
import json
import os
import sys


def readTensors(np, modelDir):
    """name -> float32 array, from the directory's safetensors shards (fp32 only)."""
    index = os.path.join(modelDir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for name in files:
        with open(os.path.join(modelDir, name), "rb") as f:
            data = f.read()
        headerBytes = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + headerBytes])
        base = 8 + headerBytes
        for tensor, entry in header.items():
            if tensor == "__metadata__":
                continue
            if entry["dtype"] != "F32":
                raise ValueError(f"{name}: {tensor} is {entry['dtype']}; write the model with "
                                 "make_random_llama.py --dtype fp32")
            begin, end = entry["data_offsets"]
            tensors[tensor] = np.frombuffer(data, np.float32, (end - begin) // 4,
                                            base + begin).reshape(entry["shape"])
    return tensors


def permuteForGgufRope(w, heads):
    """Rows of each head reordered from halves (transformers) to adjacent pairs (GGUF llama)."""
    return (w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def vocabulary(size):
    """(strings, SentencePiece token types): <unk>, <s>, </s>, 256 bytes, then t<id>."""
    special = ["<unk>", "<s>", "</s>"]
    if size < len(special) + 256:
        raise ValueError(f"vocab_size {size} is below the {len(special) + 256} fixed tokens")
    tokens = special + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"t{i}" for i in range(len(tokens), size)]
    types = [2, 3, 3] + [6] * 256 + [1] * (size - 259)  # unknown, control, byte, normal
    return tokens, types


def writeGguf(np, gguf, cfg, tensors, path):
    heads, kvHeads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    w = gguf.GGUFWriter(path + ".part", "llama")
    w.add_name("random Llama (tools/bench/make_random_llama.py)")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kvHeads)
    w.add_rope_dimension_count(cfg["head_dim"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    tokens, types = vocabulary(cfg["vocab_size"])
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    w.add_tensor("token_embd.weight", tensors["model.embed_tokens.weight"])
    for layer in range(cfg["num_hidden_layers"]):
        for hf, gg in names.items():
            t = tensors[f"model.layers.{layer}.{hf}.weight"]
            if gg == "attn_q":
                t = permuteForGgufRope(t, heads)
            elif gg == "attn_k":
                t = permuteForGgufRope(t, kvHeads)
            w.add_tensor(f"blk.{layer}.{gg}.weight", np.ascontiguousarray(t))
    w.add_tensor("output_norm.weight", tensors["model.norm.weight"])
    if not cfg.get("tie_word_embeddings", False):
        w.add_tensor("output.weight", tensors["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(path + ".part", path)


def writeVllmDir(cfg, modelDir, out):
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(modelDir):
        link = os.path.join(out, name)
        if not os.path.lexists(link):
            os.symlink(os.path.abspath(os.path.join(modelDir, name)), link)
    tokens, _ = vocabulary(cfg["vocab_size"])
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for i, t in enumerate(tokens[:3])],
        "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {t: i for i, t in enumerate(tokens)},
                  "unk_token": "<unk>"},
    }
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>",
                   "bos_token": "<s>", "eos_token": "</s>",
                   "model_max_length": cfg["max_position_embeddings"]}, f, indent=2)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir")
    p.add_argument("--gguf", required=True, help="F32 GGUF to write, for llama.cpp")
    p.add_argument("--vllm-dir", required=True, help="directory to write, for vLLM")
    args = p.parse_args(argv)
    try:
        import gguf
        import numpy as np
    except ImportError as e:
        print(f"random_llama_peers: needs numpy and gguf ({e})", file=sys.stderr)
        return 1
    try:
        with open(os.path.join(args.model_dir, "config.json")) as f:
            cfg = json.load(f)
        tensors = readTensors(np, args.model_dir)
        writeGguf(np, gguf, cfg, tensors, args.gguf)
        writeVllmDir(cfg, args.model_dir, args.vllm_dir)
    except (OSError, ValueError, KeyError) as e:
        print(f"random_llama_peers: {e}", file=sys.stderr)
        return 1
    print(f"random_llama_peers: {args.gguf}, {args.vllm_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
