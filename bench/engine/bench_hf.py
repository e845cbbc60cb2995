"""Peer for kiln bench (context only): HF transformers generate() on CPU, greedy, random prompt
ids of --input-len, exactly --output-len new tokens, --num-prompts prompts in batches of --batch.
Prints one JSON object like `kiln bench --json` (output/total tokens/s, requests/s)."""
import argparse
import json
import time

import torch
import transformers


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model_dir")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--num-prompts", type=int, default=64)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(a.model_dir, dtype=torch.float32)
    model.eval()
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, vocab, (a.num_prompts, a.input_len), generator=gen)

    def run(ids):
        with torch.inference_mode():
            return model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                  max_new_tokens=a.output_len, min_new_tokens=a.output_len,
                                  pad_token_id=0)

    run(prompts[:1, :])  # warm-up
    start = time.perf_counter()
    generated = 0
    for i in range(0, a.num_prompts, a.batch):
        out = run(prompts[i:i + a.batch])
        generated += (out.shape[1] - a.input_len) * out.shape[0]
    seconds = time.perf_counter() - start
    print(json.dumps({
        "impl": f"transformers {transformers.__version__} / torch {torch.__version__}, "
                f"{torch.get_num_threads()} threads",
        "batch": a.batch, "input_len": a.input_len, "output_len": a.output_len,
        "num_prompts": a.num_prompts, "elapsed_s": seconds,
        "requests_per_s": a.num_prompts / seconds,
        "output_tokens_per_s": generated / seconds,
        "total_tokens_per_s": (generated + a.num_prompts * a.input_len) / seconds,
    }))


if __name__ == "__main__":
    main()
