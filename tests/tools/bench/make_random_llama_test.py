"""tools/bench/make_random_llama.py.

  PresetTest (standard library only): each big preset's config.json holds the published numbers
      and its tensor list adds up to the published parameter count (--dry-run writes nothing).
  WeightsTest (numpy): bf16 rounding, the safetensors files and index of the tiny preset, seeding,
      sharding; with $KILN_BIN also `kiln compile` + `kiln inspect` + `kiln bench` on it and
      compare.py on that result (the GPU session's pipeline at toy size).
Run as: python make_random_llama_test.py [PresetTest|WeightsTest]
"""

import importlib.util
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

kRepo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
kScript = os.path.join(kRepo, "tools", "bench", "make_random_llama.py")
kCompare = os.path.join(kRepo, "tools", "bench", "compare.py")
kKiln = os.environ.get("KILN_BIN", "")


def loadModule():
    spec = importlib.util.spec_from_file_location("make_random_llama", kScript)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def runScript(*args):
    return subprocess.run([sys.executable, kScript, *args], capture_output=True, text=True)


def dryRun(*args):
    p = runScript("--dry-run", *args)
    if p.returncode != 0:
        raise AssertionError(f"--dry-run {args} failed: {p.stderr}")
    return json.loads(p.stdout)


def llama3RopeScaling(factor):
    return {"factor": factor, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192, "rope_type": "llama3"}


class PresetTest(unittest.TestCase):
    def checkCommon(self, cfg):
        self.assertEqual(cfg["architectures"], ["LlamaForCausalLM"])
        self.assertEqual(cfg["model_type"], "llama")
        self.assertEqual(cfg["hidden_act"], "silu")
        self.assertEqual(cfg["vocab_size"], 128256)
        self.assertEqual(cfg["rope_theta"], 500000.0)
        self.assertEqual(cfg["rms_norm_eps"], 1e-05)
        self.assertEqual(cfg["max_position_embeddings"], 131072)
        self.assertEqual(cfg["bos_token_id"], 128000)
        self.assertEqual(cfg["eos_token_id"], 128001)
        self.assertIs(cfg["attention_bias"], False)
        self.assertIs(cfg["mlp_bias"], False)
        self.assertEqual(cfg["torch_dtype"], "bfloat16")

    def checkShards(self, plan, count):
        self.assertEqual(len(plan["shards"]), count)
        for shard in plan["shards"]:
            self.assertLessEqual(shard["bytes"], 5_000_000_000)
        self.assertEqual(sum(s["bytes"] for s in plan["shards"]), plan["total_bytes"])
        self.assertEqual(sum(s["tensors"] for s in plan["shards"]), len(plan["tensors"]))

    def testLlama31_8b(self):
        plan = dryRun("--preset", "llama-3.1-8b")
        cfg = plan["config"]
        self.checkCommon(cfg)
        self.assertEqual(cfg["hidden_size"], 4096)
        self.assertEqual(cfg["intermediate_size"], 14336)
        self.assertEqual(cfg["num_hidden_layers"], 32)
        self.assertEqual(cfg["num_attention_heads"], 32)
        self.assertEqual(cfg["num_key_value_heads"], 8)
        self.assertEqual(cfg["head_dim"], 128)
        self.assertIs(cfg["tie_word_embeddings"], False)
        self.assertEqual(cfg["rope_scaling"], llama3RopeScaling(8.0))
        self.assertEqual(plan["total_params"], 8_030_261_248)
        self.assertEqual(plan["total_bytes"], 2 * 8_030_261_248)
        self.assertEqual(len(plan["tensors"]), 291)  # embed + 32 x 9 + norm + lm_head
        self.checkShards(plan, 4)
        self.assertEqual(plan["generation_config"]["eos_token_id"], 128001)

    def testLlama32_1b(self):
        plan = dryRun("--preset", "llama-3.2-1b")
        cfg = plan["config"]
        self.checkCommon(cfg)
        self.assertEqual(cfg["hidden_size"], 2048)
        self.assertEqual(cfg["intermediate_size"], 8192)
        self.assertEqual(cfg["num_hidden_layers"], 16)
        self.assertEqual(cfg["num_attention_heads"], 32)
        self.assertEqual(cfg["num_key_value_heads"], 8)
        self.assertEqual(cfg["head_dim"], 64)
        self.assertIs(cfg["tie_word_embeddings"], True)
        self.assertEqual(cfg["rope_scaling"], llama3RopeScaling(32.0))
        self.assertEqual(plan["total_params"], 1_235_814_400)
        self.assertEqual(len(plan["tensors"]), 146)  # tied: no lm_head tensor
        self.assertNotIn("lm_head.weight", [t["name"] for t in plan["tensors"]])
        self.checkShards(plan, 1)

    def testLlama32_3b(self):
        plan = dryRun("--preset", "llama-3.2-3b")
        cfg = plan["config"]
        self.checkCommon(cfg)
        self.assertEqual(cfg["hidden_size"], 3072)
        self.assertEqual(cfg["intermediate_size"], 8192)
        self.assertEqual(cfg["num_hidden_layers"], 28)
        self.assertEqual(cfg["num_attention_heads"], 24)
        self.assertEqual(cfg["num_key_value_heads"], 8)
        self.assertEqual(cfg["head_dim"], 128)
        self.assertIs(cfg["tie_word_embeddings"], True)
        self.assertEqual(cfg["rope_scaling"], llama3RopeScaling(32.0))
        self.assertEqual(plan["total_params"], 3_212_749_824)
        self.checkShards(plan, 2)

    def testRandom98m(self):
        # The CPU benchmarks' second model (docs/benchmarks.md): transformers' LlamaConfig defaults
        # for rope and eps, no rope scaling; 98.6M parameters, 394 MB in fp32.
        plan = dryRun("--preset", "random-98.6m", "--dtype", "fp32")
        cfg = plan["config"]
        self.assertEqual((cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]),
                         (1024, 2816, 8))
        self.assertEqual((cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]),
                         (16, 4, 64))
        self.assertEqual((cfg["vocab_size"], cfg["bos_token_id"], cfg["eos_token_id"]), (8192, 1, 2))
        self.assertEqual((cfg["rope_theta"], cfg["rms_norm_eps"]), (10000.0, 1e-06))
        self.assertNotIn("rope_scaling", cfg)
        self.assertIs(cfg["tie_word_embeddings"], True)
        self.assertEqual(plan["total_params"], 98_583_552)
        self.assertEqual(plan["total_bytes"], 394_334_208)

    def testTensorShapesOf8b(self):
        shapes = {t["name"]: t["shape"] for t in dryRun("--preset", "llama-3.1-8b")["tensors"]}
        self.assertEqual(shapes["model.embed_tokens.weight"], [128256, 4096])
        self.assertEqual(shapes["lm_head.weight"], [128256, 4096])
        self.assertEqual(shapes["model.layers.31.self_attn.q_proj.weight"], [4096, 4096])
        self.assertEqual(shapes["model.layers.31.self_attn.k_proj.weight"], [1024, 4096])
        self.assertEqual(shapes["model.layers.31.self_attn.v_proj.weight"], [1024, 4096])
        self.assertEqual(shapes["model.layers.31.self_attn.o_proj.weight"], [4096, 4096])
        self.assertEqual(shapes["model.layers.0.mlp.gate_proj.weight"], [14336, 4096])
        self.assertEqual(shapes["model.layers.0.mlp.down_proj.weight"], [4096, 14336])
        self.assertEqual(shapes["model.layers.0.input_layernorm.weight"], [4096])
        self.assertEqual(shapes["model.norm.weight"], [4096])

    def testLayersAndDtypeOverrides(self):
        plan = dryRun("--preset", "llama-3.1-8b", "--layers", "2", "--dtype", "fp32")
        self.assertEqual(plan["config"]["num_hidden_layers"], 2)
        self.assertEqual(plan["config"]["torch_dtype"], "float32")
        # 2 x embedding table + 2 x 218,112,000 per layer + final norm
        self.assertEqual(plan["total_params"], 2 * 525_336_576 + 2 * 218_112_000 + 4096)
        self.assertEqual(plan["total_bytes"], 4 * plan["total_params"])
        self.assertEqual({t["dtype"] for t in plan["tensors"]}, {"F32"})

    def testBadFlagsAreNamed(self):
        p = runScript("--preset", "tiny", "--layers", "0", "--dry-run")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--layers must be at least 1, got 0", p.stderr)
        p = runScript("--preset", "tiny")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--out DIR is required", p.stderr)
        p = runScript("--preset", "llama-4", "--dry-run")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--preset", p.stderr)


def readSafetensors(path):
    """(header without __metadata__, data bytes) of one safetensors file, parsed by hand."""
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        data = f.read()
    header.pop("__metadata__", None)
    return header, data


class WeightsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import numpy
        cls.np = numpy
        cls.module = loadModule()
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model = os.path.join(cls.tmp.name, "tiny")
        p = runScript("--preset", "tiny", "--out", cls.model, "--seed", "7")
        if p.returncode != 0:
            raise AssertionError(p.stderr)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def testBf16RoundsToNearestEven(self):
        np = self.np
        bits = np.array([0x3F800000, 0x3F808000, 0x3F818000, 0x3F808001, 0xBF7FFFFF, 0x00000000],
                        dtype=np.uint32)
        got = self.module.toStorage(np, bits.view(np.float32), "bf16")
        # 1.0 exact; a tie keeps the even 0x3F80; a tie from odd 0x3F81 goes up to 0x3F82; just
        # above a tie rounds up; -0.99999994 carries into the exponent (-1.0); zero stays zero.
        self.assertEqual([int(b) for b in got], [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xBF80, 0x0000])

    def testFilesIndexAndValues(self):
        np = self.np
        with open(os.path.join(self.model, "model.safetensors.index.json")) as f:
            index = json.load(f)
        with open(os.path.join(self.model, "config.json")) as f:
            cfg = json.load(f)
        with open(os.path.join(self.model, "generation_config.json")) as f:
            self.assertEqual(json.load(f)["eos_token_id"], 2)
        self.assertEqual(cfg["vocab_size"], 1024)
        self.assertEqual(index["metadata"]["total_parameters"], 229_696)
        self.assertEqual(index["metadata"]["total_size"], 2 * 229_696)
        self.assertEqual(set(index["weight_map"].values()), {"model-00001-of-00001.safetensors"})
        header, data = readSafetensors(os.path.join(self.model, "model-00001-of-00001.safetensors"))
        self.assertEqual(set(header), set(index["weight_map"]))
        self.assertEqual(header["model.layers.1.self_attn.q_proj.weight"]["shape"], [64, 64])
        self.assertEqual(header["model.layers.1.self_attn.k_proj.weight"]["shape"], [32, 64])
        self.assertEqual(header["model.layers.0.mlp.down_proj.weight"]["shape"], [64, 192])
        self.assertEqual(header["lm_head.weight"]["shape"], [1024, 64])
        self.assertEqual(len(data), 2 * 229_696)
        matrices = []
        for name, t in header.items():
            self.assertEqual(t["dtype"], "BF16", name)
            begin, end = t["data_offsets"]
            words = np.frombuffer(data[begin:end], dtype=np.uint16)
            if name.endswith("norm.weight"):
                self.assertTrue((words == 0x3F80).all(), name)  # exactly 1.0
            else:
                matrices.append(words)
        values = (np.concatenate(matrices).astype(np.uint32) << 16).view(np.float32)
        self.assertLess(abs(float(values.mean())), 1e-3)
        self.assertAlmostEqual(float(values.std()), 0.02, delta=0.001)

    def testSeedDecidesTheBytes(self):
        again = os.path.join(self.tmp.name, "again")
        other = os.path.join(self.tmp.name, "other")
        self.assertEqual(runScript("--preset", "tiny", "--out", again, "--seed", "7").returncode, 0)
        self.assertEqual(runScript("--preset", "tiny", "--out", other, "--seed", "8").returncode, 0)
        name = "model-00001-of-00001.safetensors"
        read = lambda d: open(os.path.join(d, name), "rb").read()  # noqa: E731
        self.assertEqual(read(again), read(self.model))
        self.assertNotEqual(read(other), read(self.model))

    def testShardsAndIndexAgree(self):
        out = os.path.join(self.tmp.name, "sharded")
        p = runScript("--preset", "tiny", "--out", out, "--max-shard-bytes", "100000",
                      "--dtype", "fp16")
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(out, "model.safetensors.index.json")) as f:
            weightMap = json.load(f)["weight_map"]
        files = sorted(set(weightMap.values()))
        self.assertGreater(len(files), 3)
        seen = {}
        for file in files:
            header, data = readSafetensors(os.path.join(out, file))
            if len(header) > 1:  # a tensor above the limit (the 128 KiB tables) sits alone
                self.assertLessEqual(len(data), 100000, file)
            for name, t in header.items():
                self.assertEqual(t["dtype"], "F16")
                seen[name] = file
        self.assertEqual(seen, weightMap)

    def kiln(self, *args):
        p = subprocess.run([kKiln, *args], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, f"kiln {' '.join(args)}: {p.stderr}")
        return p.stdout

    @unittest.skipUnless(kKiln, "KILN_BIN is not set (the kiln binary with the compiler)")
    def testKilnCompilesInspectsAndBenchesIt(self):
        art = os.path.join(self.tmp.name, "tiny.kiln")
        self.kiln("compile", self.model, "-o", art, "--dtype", "bf16", "--max-batch", "4",
                  "--max-seq-len", "256", "--quiet")
        info = json.loads(self.kiln("inspect", art, "--summary"))
        m = info["model"]
        self.assertEqual((m["vocab_size"], m["hidden_size"], m["intermediate_size"],
                          m["num_layers"], m["num_heads"], m["num_kv_heads"], m["head_dim"]),
                         (1024, 64, 192, 2, 4, 2, 16))
        self.assertEqual(m["rope_scaling"], "llama3")
        self.assertEqual(m["rope_theta"], 500000.0)
        self.assertEqual(m["source_dtype"], "BF16")
        self.assertEqual(m["tie_word_embeddings"], False)
        self.assertEqual((m["bos_token_id"], m["eos_token_ids"]), (1, [2]))
        shapes = {w["name"]: w["shape"] for w in info["ranks"][0]["weights"]}
        self.assertEqual(shapes["embed.weight"], [1024, 64])
        self.assertEqual(shapes["layers.0.attn.qkv.weight"], [128, 64])  # (4 + 2 x 2) x 16
        self.assertEqual(shapes["layers.1.attn.o.weight"], [64, 64])
        self.assertEqual(shapes["layers.0.mlp.gate_up.weight"], [384, 64])
        self.assertEqual(shapes["layers.1.mlp.down.weight"], [64, 192])
        self.assertEqual(shapes["lm_head.weight"], [1024, 64])
        bench = self.kiln("bench", art, "--batch", "2", "--input-len", "16", "--output-len", "4",
                          "--num-prompts", "2", "--ttft-len", "64", "--ttft-repeats", "1",
                          "--json")
        result = os.path.join(self.tmp.name, "kiln.json")
        with open(result, "w") as f:
            f.write(bench)
        self.assertEqual(json.loads(bench)["weights_dtype"], "BF16")
        p = subprocess.run([sys.executable, kCompare, "--kiln", result], capture_output=True,
                           text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("| 2 | 16 / 4 |", p.stdout)
        self.assertIn("| kiln | 64 |", p.stdout)


if __name__ == "__main__":
    unittest.main()
