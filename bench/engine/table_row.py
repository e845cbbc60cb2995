"""Formats one `kiln bench --json` object (stdin) as a markdown table row for run_cpu.sh."""
import json
import sys

r = json.load(sys.stdin)
t, i, e = r["ttft_ms"], r["itl_ms"], r["engine"]
b1 = r.get("batch1_decode_tokens_per_s")
cells = [
    sys.argv[1], str(r["batch"]), f"{r['requests_per_s']:.1f}",
    f"{r['output_tokens_per_s']:,.0f}", f"{r['total_tokens_per_s']:,.0f}",
    f"{t['mean']:.1f} / {t['p50']:.1f} / {t['p99']:.1f}",
    f"{i['mean']:.2f} / {i['p50']:.2f} / {i['p99']:.2f}",
    f"{b1:,.0f}" if b1 else "", str(e["steps"]), f"{e['mean_tokens_per_step']:.1f}",
]
print("| " + " | ".join(cells) + " |")
