"""tools/bench/hf_peer.py on the tiny random model on the CPU: the JSON has every field
`kiln bench --json` documents (docs/benchmarks.md), the counts are exact (min_new_tokens =
max_new_tokens) and the rates are the counts over the elapsed time. Needs torch and transformers:
run_python_test.sh runs it only with $KILN_TEST_TORCH_PYTHON (CI never runs torch)."""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

kRepo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
kBench = os.path.join(kRepo, "tools", "bench")

# The fields tests/tools/kiln/bench_command_test.cc requires of `kiln bench --json`.
kKilnFields = ["artifact", "device", "batch", "input_len", "output_len", "num_prompts",
               "ignore_eos", "weights_dtype", "model", "elapsed_s", "requests_per_s",
               "output_tokens_per_s", "total_tokens_per_s", "ttft_ms", "itl_ms", "engine",
               "batch1_decode_tokens_per_s", "prefill_tokens_per_s", "long_prompt_ttft_ms"]
kModelFields = ["vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                "num_kv_heads", "head_dim", "tie_word_embeddings", "tp", "weights_dtype",
                "weight_bytes", "activation_dtype", "kv_dtype"]


def loadPeer():
    spec = importlib.util.spec_from_file_location("hf_peer", os.path.join(kBench, "hf_peer.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class HfPeerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model = os.path.join(cls.tmp.name, "tiny")
        subprocess.run([sys.executable, os.path.join(kBench, "make_random_llama.py"), "--preset",
                        "tiny", "--out", cls.model], check=True, capture_output=True)
        p = subprocess.run([sys.executable, os.path.join(kBench, "hf_peer.py"), "--model",
                            cls.model, "--device", "cpu", "--threads", "1", "--batch", "2",
                            "--input-len", "8", "--output-len", "5", "--num-prompts", "3",
                            "--ttft-len", "40", "--ttft-repeats", "2"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise AssertionError(p.stderr)
        cls.result = json.loads(p.stdout)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def testSameFieldsAsKilnBench(self):
        for field in kKilnFields:
            self.assertIn(field, self.result)
        for field in kModelFields:
            self.assertIn(field, self.result["model"])
        for latency in ("ttft_ms", "itl_ms"):
            self.assertEqual(set(self.result[latency]), {"mean", "p50", "p99"})
        self.assertEqual(set(self.result["long_prompt_ttft_ms"]),
                         {"input_len", "repeats", "mean", "p50", "min", "max"})

    def testWorkloadAndModel(self):
        r = self.result
        self.assertEqual((r["device"], r["batch"], r["input_len"], r["output_len"],
                          r["num_prompts"], r["ignore_eos"], r["weights_dtype"]),
                         ("cpu", 2, 8, 5, 3, True, "BF16"))
        m = r["model"]
        self.assertEqual((m["vocab_size"], m["hidden_size"], m["intermediate_size"],
                          m["num_layers"], m["num_heads"], m["num_kv_heads"], m["head_dim"]),
                         (1024, 64, 192, 2, 4, 2, 16))
        self.assertEqual(m["params"], 229_696)  # make_random_llama.py --dry-run's count
        self.assertEqual(m["weight_bytes"], 2 * 229_696)

    def testRatesAreTheCountsOverTheElapsedTime(self):
        r = self.result
        seconds = r["elapsed_s"]
        self.assertGreater(seconds, 0)
        self.assertEqual(r["engine"]["generated_tokens"], 3 * 5)
        self.assertAlmostEqual(r["requests_per_s"], 3 / seconds, delta=1e-9 * 3 / seconds)
        self.assertAlmostEqual(r["output_tokens_per_s"], 15 / seconds, delta=1e-9 * 15 / seconds)
        self.assertAlmostEqual(r["total_tokens_per_s"], 39 / seconds, delta=1e-9 * 39 / seconds)
        self.assertGreater(r["batch1_decode_tokens_per_s"], 0)

    def testLongPromptTtft(self):
        t = self.result["long_prompt_ttft_ms"]
        self.assertEqual((t["input_len"], t["repeats"]), (40, 2))
        self.assertLessEqual(t["min"], t["p50"])
        self.assertLessEqual(t["p50"], t["max"])
        self.assertAlmostEqual(self.result["prefill_tokens_per_s"], 40 / (t["mean"] * 1e-3),
                               delta=1e-6)

    def testPercentilesAreNearestRankAsKilnComputesThem(self):
        latencyMs = loadPeer().latencyMs
        values = [0.001 * v for v in range(1, 101)]  # 1..100 ms
        got = latencyMs(values)
        self.assertAlmostEqual(got["p50"], 50.0)
        self.assertAlmostEqual(got["p99"], 99.0)
        self.assertAlmostEqual(got["mean"], 50.5)
        self.assertAlmostEqual(latencyMs([0.003])["p99"], 3.0)

    def testModelGivenTwiceIsAnError(self):
        p = subprocess.run([sys.executable, os.path.join(kBench, "hf_peer.py"), self.model,
                            "--model", self.model], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("MODEL_DIR or --model DIR", p.stderr)


if __name__ == "__main__":
    unittest.main()
