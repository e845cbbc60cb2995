#!/usr/bin/env python3
"""Markdown tables from `kiln bench --json` results, tools/bench/hf_peer.py results (the same
field names) and a roofline JSON measured on the same GPU in the same session (fields
hbm_bytes_per_s, bf16_flops_per_s, device_name).

    compare.py --kiln kiln_*.json --hf hf_*.json --roofline roofline.json

Each input file holds one JSON object, a JSON array of objects, or one object per line.

Throughput: per workload (batch, input_len, output_len), kiln's and HF's output tokens/s and their
ratio, total tokens/s, TTFT and ITL p50.

Roofline (tp 1 only; the model shapes come from each result's "model" object):
  batch-1 decode: one token reads every layer's matrices and the lm_head once, plus the KV cache
      of its context:
        bytes/token = wbytes * (L * (H*(q + 2*kv) + q*H + 3*H*I) + V*H)
                      + 2 * L * kv * ctx * kvbytes,   q = heads*head_dim, kv = kv_heads*head_dim,
      with ctx = input_len + output_len / 2 (the mean context of the decode steps). The embedding
      lookup (one row) and the norm vectors are left out (< 0.01% of the bytes for Llama 3).
      fraction of HBM = bytes/token * decode tokens/s / hbm_bytes_per_s      (goal >= 0.90)
  prefill (one prompt of N = --ttft-len tokens alone):
        FLOPs = 2 * N * L * (H*(q + 2*kv) + q*H + 3*H*I)    the layers' matrix products
              + 2 * V * H                                     lm_head, last position only
              + 2 * L * heads * head_dim * N * (N + 1)        causal QK^T and PV
      i.e. 2 * params * tokens with params the layers' matrices (not the embedding table, whose
      lookup does no arithmetic) plus attention. FLOP/s = FLOPs / mean long-prompt TTFT.
      fraction of peak = FLOP/s / bf16_flops_per_s                           (goal >= 0.60)
"""

import argparse
import json
import sys

kDecodeGoal = 0.90
kPrefillGoal = 0.60
kDtypeBytes = {"BF16": 2, "F16": 2, "F32": 4, "F8E4M3": 1, "F8E5M2": 1, "I8": 1}


def dtypeBytes(name):
    if name not in kDtypeBytes:
        raise ValueError(f"unknown dtype {name!r} (known: {', '.join(sorted(kDtypeBytes))})")
    return kDtypeBytes[name]


def layerMatrixParams(m):
    """Elements of every layer's projection matrices (q, k, v, o, gate, up, down)."""
    h, i = m["hidden_size"], m["intermediate_size"]
    q, kv = m["num_heads"] * m["head_dim"], m["num_kv_heads"] * m["head_dim"]
    return m["num_layers"] * (h * (q + 2 * kv) + q * h + 3 * h * i)


def decodeBytesPerToken(m, context):
    weights = (layerMatrixParams(m) + m["vocab_size"] * m["hidden_size"]) * dtypeBytes(
        m["weights_dtype"])
    kv = 2 * m["num_layers"] * m["num_kv_heads"] * m["head_dim"] * context * dtypeBytes(
        m["kv_dtype"])
    return weights + kv


def prefillFlops(m, n):
    matmuls = 2 * n * layerMatrixParams(m)
    lmHead = 2 * m["vocab_size"] * m["hidden_size"]
    attention = 2 * m["num_layers"] * m["num_heads"] * m["head_dim"] * n * (n + 1)
    return matmuls + lmHead + attention


def decodeContext(r):
    return r["input_len"] + r["output_len"] / 2


def decodeRoofline(r, roofline):
    """(bytes/token, achieved bytes/s, fraction of HBM or None) for r's batch-1 decode figure."""
    perToken = decodeBytesPerToken(r["model"], decodeContext(r))
    achieved = perToken * r["batch1_decode_tokens_per_s"]
    hbm = roofline.get("hbm_bytes_per_s") if roofline else None
    return perToken, achieved, (achieved / hbm if hbm else None)


def prefillRoofline(r, roofline):
    """(FLOPs, achieved FLOP/s, fraction of the bf16 peak or None) for r's long-prompt TTFT."""
    ttft = r["long_prompt_ttft_ms"]
    flops = prefillFlops(r["model"], ttft["input_len"])
    achieved = flops / (ttft["mean"] * 1e-3)
    peak = roofline.get("bf16_flops_per_s") if roofline else None
    return flops, achieved, (achieved / peak if peak else None)


def warn(message):
    print(f"compare: {message}", file=sys.stderr)


def parseObjects(text):
    """One object, an array of objects, or one object per line."""
    try:
        data = json.loads(text)
        objects = data if isinstance(data, list) else [data]
    except json.JSONDecodeError:
        objects = [json.loads(line) for line in text.splitlines() if line.strip()]
    for o in objects:
        if not isinstance(o, dict):
            raise ValueError(f"expected JSON objects, got {type(o).__name__}")
    return objects


def loadResults(paths):
    """Every result object in `paths`. A file that is missing, empty or not JSON (a benchmark
    run that failed or timed out) is skipped with a warning so the other results still print."""
    results = []
    for path in paths:
        try:
            with open(path) as f:
                text = f.read()
            if not text.strip():
                raise ValueError("empty")
            results += [dict(r, source=path) for r in parseObjects(text)]
        except (OSError, ValueError) as e:
            warn(f"skipping {path}: {e}")
    return results


def loadRoofline(path):
    """The roofline object, with hbm_bytes_per_s / bf16_flops_per_s set to None where the file
    lacks a positive number (the fractions then read n/a)."""
    found = loadResults([path])
    roofline = found[0] if found else {}
    for field in ("hbm_bytes_per_s", "bf16_flops_per_s"):
        value = roofline.get(field)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            warn(f"{path}: {field} is {value!r}, not a positive number: its fractions read n/a")
            roofline[field] = None
    return roofline


def workload(r):
    return (r["batch"], r["input_len"], r["output_len"])


def fmt(value, digits=1):
    return "n/a" if value is None else f"{value:,.{digits}f}"


def times(value):
    return "n/a" if value is None else f"{value:.2f}x"


def ratio(a, b):
    return None if a is None or not b else a / b


def throughputTable(kiln, hf):
    byKey = {}
    for side, results in (("kiln", kiln), ("hf", hf)):
        for r in results:
            if "output_tokens_per_s" in r or "errors" in r:
                byKey.setdefault(workload(r), {})[side] = r
    lines = ["| batch | in / out | kiln out tok/s | HF out tok/s | kiln / HF | kiln total tok/s "
             "| HF total tok/s | TTFT p50 ms kiln / HF | ITL p50 ms kiln / HF |",
             "|---:|---|---:|---:|---:|---:|---:|---|---|"]
    for key in sorted(byKey):
        k, h = byKey[key].get("kiln", {}), byKey[key].get("hf", {})
        kOut, hOut = k.get("output_tokens_per_s"), h.get("output_tokens_per_s")
        hNote = "OOM" if "throughput" in h.get("errors", {}) else fmt(hOut)
        lines.append(
            f"| {key[0]} | {key[1]} / {key[2]} | {fmt(kOut)} | {hNote} | "
            f"{times(ratio(kOut, hOut))} | {fmt(k.get('total_tokens_per_s'))} | "
            f"{fmt(h.get('total_tokens_per_s'))} | {latency(k, 'ttft_ms')} / {latency(h, 'ttft_ms')} "
            f"| {latency(k, 'itl_ms', 2)} / {latency(h, 'itl_ms', 2)} |")
    return lines


def latency(r, field, digits=1):
    return fmt(r[field]["p50"], digits) if field in r else "n/a"


def goalMark(fraction, goal):
    if fraction is None:
        return "n/a"
    return f"{fraction:.3f} ({'meets' if fraction >= goal else 'below'} {goal:.2f})"


def rooflineTables(sides, roofline):
    decode = ["| impl | in / out | batch-1 decode tok/s | GB/token | achieved GB/s | "
              "fraction of HBM |", "|---|---|---:|---:|---:|---|"]
    prefill = ["| impl | prompt tokens | TTFT mean ms | TFLOP | achieved TFLOP/s | "
               "fraction of bf16 peak |", "|---|---:|---:|---:|---:|---|"]
    for name, results in sides:
        for r in results:
            if r.get("model", {}).get("tp", 1) != 1:
                continue
            if r.get("batch1_decode_tokens_per_s"):
                perToken, achieved, fraction = decodeRoofline(r, roofline)
                decode.append(f"| {name} | {r['input_len']} / {r['output_len']} | "
                              f"{fmt(r['batch1_decode_tokens_per_s'])} | {perToken / 1e9:.4g} | "
                              f"{achieved / 1e9:.4g} | {goalMark(fraction, kDecodeGoal)} |")
            if "long_prompt_ttft_ms" in r:
                flops, achieved, fraction = prefillRoofline(r, roofline)
                t = r["long_prompt_ttft_ms"]
                prefill.append(f"| {name} | {t['input_len']} | {t['mean']:,.2f} | "
                               f"{flops / 1e12:.4g} | {achieved / 1e12:.4g} | "
                               f"{goalMark(fraction, kPrefillGoal)} |")
    return decode, prefill


def report(kiln, hf, roofline):
    lines = []
    if roofline:
        hbm, peak = roofline["hbm_bytes_per_s"], roofline["bf16_flops_per_s"]
        lines.append(f"Device: {roofline.get('device_name') or '?'}; measured HBM "
                     f"{fmt(hbm and hbm / 1e12, 2)} TB/s, bf16 peak "
                     f"{fmt(peak and peak / 1e12)} TFLOP/s.")
        for r in kiln + hf:
            name = r.get("device_name")
            if name and name != roofline.get("device_name") and name != "cpu":
                lines.append(f"Note: a result ran on {name}, the roofline on "
                             f"{roofline.get('device_name')}.")
                break
        lines.append("")
    lines += ["### Throughput", ""] + throughputTable(kiln, hf)
    decode, prefill = rooflineTables([("kiln", kiln), ("HF", hf)], roofline)
    lines += ["", "### Batch-1 decode against HBM bandwidth", ""] + decode
    lines += ["", "### Prefill against the bf16 tensor-core peak", ""] + prefill
    lines += ["", "Formulas: tools/bench/compare.py (docstring)."]
    return "\n".join(lines) + "\n"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kiln", nargs="+", default=[], help="kiln bench --json output files")
    p.add_argument("--hf", nargs="*", default=[], help="hf_peer.py output files")
    p.add_argument("--roofline", help="JSON with hbm_bytes_per_s, bf16_flops_per_s, device_name")
    a = p.parse_args(argv)
    kiln, hf = loadResults(a.kiln), loadResults(a.hf)
    roofline = loadRoofline(a.roofline) if a.roofline else None
    if not kiln and not hf:
        warn("no results to compare")
        return 1
    try:
        sys.stdout.write(report(kiln, hf, roofline))
    except (ValueError, KeyError, TypeError) as e:
        warn(f"a result lacks what the tables need: {type(e).__name__}: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
