"""tools/bench/compare.py: the roofline arithmetic on hand-checked numbers and the markdown it
prints for hand-made kiln / HF / roofline JSON files. Standard library only (CI's python3)."""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

kRepo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
kScript = os.path.join(kRepo, "tools", "bench", "compare.py")

spec = importlib.util.spec_from_file_location("compare", kScript)
compare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare)

# Llama-3.1-8B's shapes as `kiln bench --json` reports them.
kLlama8b = {"vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
            "num_layers": 32, "num_heads": 32, "num_kv_heads": 8, "head_dim": 128,
            "tie_word_embeddings": False, "tp": 1, "weights_dtype": "BF16", "kv_dtype": "BF16"}
# Small enough to count by hand: q = 2*2 = 4, kv = 1*2 = 2.
kToy = {"vocab_size": 10, "hidden_size": 4, "intermediate_size": 8, "num_layers": 1,
        "num_heads": 2, "num_kv_heads": 1, "head_dim": 2, "tie_word_embeddings": True, "tp": 1,
        "weights_dtype": "BF16", "kv_dtype": "F32"}


class Arithmetic(unittest.TestCase):
    def testLayerMatricesOfTheToyModel(self):
        # q 4x4 + k 2x4 + v 2x4 + o 4x4 + gate/up/down 3 x 4x8 = 16 + 8 + 8 + 16 + 96
        self.assertEqual(compare.layerMatrixParams(kToy), 144)

    def testLayerMatricesOfLlama8b(self):
        # 32 x (4096 x (4096 + 2 x 1024) + 4096 x 4096 + 3 x 4096 x 14336); with the embedding
        # table twice (untied), 32 x 8192 norm weights and the final norm this is the published
        # 8,030,261,248 parameters.
        self.assertEqual(compare.layerMatrixParams(kLlama8b), 6_979_321_856)
        self.assertEqual(6_979_321_856 + 2 * 128256 * 4096 + 32 * 2 * 4096 + 4096, 8_030_261_248)

    def testDecodeBytesPerToken(self):
        # toy: (144 + 10 x 4) bf16 elements + K and V of 1 layer x 1 head x 2 dims x 3 positions
        # in fp32 = 368 + 48
        self.assertEqual(compare.decodeBytesPerToken(kToy, 3), 416)
        # 8B: (6,979,321,856 + 128,256 x 4096) x 2 bytes, then + 2 x 32 x 8 x 128 x 192 x 2
        self.assertEqual(compare.decodeBytesPerToken(kLlama8b, 0), 15_009_316_864)
        self.assertEqual(compare.decodeBytesPerToken(kLlama8b, 192), 15_034_482_688)

    def testPrefillFlops(self):
        # toy, N = 3: 2 x 3 x 144 + 2 x 10 x 4 + 2 x 1 x 2 x 2 x 3 x 4 = 864 + 80 + 96
        self.assertEqual(compare.prefillFlops(kToy, 3), 1040)
        # 8B, N = 4096: 57,174,604,644,352 (matrices) + 1,050,673,152 (lm_head, last position)
        # + 4,399,120,252,928 (2 x 32 x 32 x 128 x 4096 x 4097, causal attention)
        self.assertEqual(compare.prefillFlops(kLlama8b, 4096), 61_574_775_570_432)

    def testDecodeFraction(self):
        r = {"input_len": 128, "output_len": 128, "batch1_decode_tokens_per_s": 180.0,
             "model": kLlama8b}
        perToken, achieved, fraction = compare.decodeRoofline(r, {"hbm_bytes_per_s": 3.0e12})
        self.assertEqual(perToken, 15_034_482_688)  # context 128 + 128 / 2 = 192
        self.assertAlmostEqual(achieved, 15_034_482_688 * 180.0, delta=1)
        self.assertAlmostEqual(fraction, 15_034_482_688 * 180.0 / 3.0e12, places=12)
        self.assertIsNone(compare.decodeRoofline(r, {"hbm_bytes_per_s": None})[2])

    def testPrefillFraction(self):
        r = {"long_prompt_ttft_ms": {"input_len": 4096, "mean": 128.0}, "model": kLlama8b}
        flops, achieved, fraction = compare.prefillRoofline(r, {"bf16_flops_per_s": 8.0e14})
        self.assertEqual(flops, 61_574_775_570_432)
        self.assertAlmostEqual(achieved, 61_574_775_570_432 / 0.128, delta=1)
        self.assertAlmostEqual(fraction, 61_574_775_570_432 / 0.128 / 8.0e14, places=12)

    def testUnknownDtypeIsAnErrorNamingIt(self):
        with self.assertRaisesRegex(ValueError, "unknown dtype 'Q4'"):
            compare.decodeBytesPerToken(dict(kToy, weights_dtype="Q4"), 1)


def result(batch, inLen, outLen, outTokS, **extra):
    r = {"batch": batch, "input_len": inLen, "output_len": outLen, "num_prompts": batch,
         "output_tokens_per_s": outTokS, "total_tokens_per_s": outTokS * (inLen + outLen) / outLen,
         "ttft_ms": {"mean": 10.0, "p50": 9.0, "p99": 20.0},
         "itl_ms": {"mean": 5.0, "p50": 4.5, "p99": 8.0}, "model": kLlama8b}
    r.update(extra)
    return r


class Report(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, content):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write(content if isinstance(content, str) else json.dumps(content))
        return path

    def compare(self, *args):
        return subprocess.run([sys.executable, kScript, *args], capture_output=True, text=True)

    def testTablesFromHandMadeFiles(self):
        kiln = [self.write("k1.json", result(1, 128, 128, 175.0, batch1_decode_tokens_per_s=180.0,
                                             long_prompt_ttft_ms={"input_len": 4096, "mean": 128.0,
                                                                  "p50": 127.0, "min": 126.0,
                                                                  "max": 130.0})),
                self.write("k64.json", result(64, 128, 128, 5000.0))]
        # Two HF results in one file, one object per line; batch 256 ran out of memory.
        hf = self.write("hf.json", json.dumps(result(64, 128, 128, 2000.0)) + "\n" + json.dumps(
            {"batch": 256, "input_len": 128, "output_len": 128, "errors": {"throughput": "oom"}}))
        roofline = self.write("roofline.json", {"device_name": "NVIDIA H100 80GB HBM3",
                                                "hbm_bytes_per_s": 3.0e12,
                                                "bf16_flops_per_s": 8.0e14})
        p = self.compare("--kiln", *kiln, "--hf", hf, "--roofline", roofline)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = p.stdout
        self.assertIn("Device: NVIDIA H100 80GB HBM3; measured HBM 3.00 TB/s, bf16 peak 800.0 "
                      "TFLOP/s.", out)
        self.assertIn("| 64 | 128 / 128 | 5,000.0 | 2,000.0 | 2.50x | 10,000.0 | 4,000.0 "
                      "| 9.0 / 9.0 | 4.50 / 4.50 |", out)
        self.assertIn("| 1 | 128 / 128 | 175.0 | n/a | n/a |", out)
        self.assertIn("| 256 | 128 / 128 | n/a | OOM | n/a |", out)
        # 15,034,482,688 bytes/token x 180 tok/s = 2,706 GB/s = 0.902 of 3 TB/s
        self.assertIn("| kiln | 128 / 128 | 180.0 | 15.03 | 2706 | 0.902 (meets 0.90) |", out)
        # 61.57 TFLOP in 128 ms = 481.1 TFLOP/s = 0.601 of 800
        self.assertIn("| kiln | 4096 | 128.00 | 61.57 | 481.1 | 0.601 (meets 0.60) |", out)

    def testBelowTheGoalSaysSo(self):
        kiln = self.write("k.json", result(1, 128, 128, 100.0, batch1_decode_tokens_per_s=100.0))
        roofline = self.write("r.json", {"device_name": "x", "hbm_bytes_per_s": 3.0e12,
                                         "bf16_flops_per_s": 8.0e14})
        p = self.compare("--kiln", kiln, "--roofline", roofline)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("0.501 (below 0.90)", p.stdout)

    def testFailedRunsAndAMissingRooflineAreSkippedWithAWarning(self):
        kiln = self.write("k.json", result(64, 128, 128, 5000.0))
        empty = self.write("timed_out.json", "")
        broken = self.write("broken.json", "{not json")
        roofline = self.write("r.json", {"device_name": None, "hbm_bytes_per_s": None,
                                         "bf16_flops_per_s": None, "errors": ["no GPU"]})
        missing = os.path.join(self.dir.name, "hf-*.json")
        p = self.compare("--kiln", kiln, empty, broken, "--hf", missing, "--roofline", roofline)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("| 64 | 128 / 128 | 5,000.0 | n/a | n/a |", p.stdout)
        self.assertIn("measured HBM n/a TB/s, bf16 peak n/a TFLOP/s", p.stdout)
        for name in ("timed_out.json: empty", "broken.json", "hf-*.json",
                     "hbm_bytes_per_s is None"):
            self.assertIn(name, p.stderr)

    def testNoResultsAtAllFails(self):
        p = self.compare("--kiln", os.path.join(self.dir.name, "absent.json"))
        self.assertEqual(p.returncode, 1)
        self.assertIn("no results to compare", p.stderr)


if __name__ == "__main__":
    unittest.main()
