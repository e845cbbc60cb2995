"""Tiny random Llama fixtures (HF model dirs) for kiln's import and end-to-end tests.

Used by make_llama_goldens.py; not meant to be run on its own. Everything here is seeded so a rerun
writes the same bytes (same torch/transformers/tokenizers versions assumed).
"""

import json
import math
import os
import shutil
from dataclasses import dataclass

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM

kVocab = 512
kBos, kEos = 1, 2
kGenerationEos = [2, 7]  # a list on purpose: importers must accept list-valued eos_token_id

# Weights drawn with a std well above HF's 0.02 default so logits spread over several units and a
# wrong importer (transposed matrix, wrong RoPE layout, missing norm) moves them far beyond 1e-4.
kWeightStd = 0.15
kNormStd = 0.1

# Byte-level BPE training text: only needs enough distinct pairs to reach 512 tokens.
kTokenizerCorpus = """\
Once upon a time, in a small village between two green hills, there lived a curious girl named
Mira. Every morning she walked to the river with her old dog, Pepper, and counted the boats that
drifted past. Some carried apples, some carried wool, and one strange boat carried nothing but a
brass bell that rang whenever the wind changed. Mira wanted to know where the bell came from, so
she asked the baker, the blacksmith, the teacher and the quiet fisherman who mended nets by the
bridge. Nobody knew. One rainy afternoon the boat stopped at the wooden pier. Mira climbed aboard,
lifted the bell, and found a folded map hidden underneath. The map showed a path through the
forest, over a frozen lake, and up to a lighthouse on the northern coast. She packed bread,
cheese, a warm jacket, a lantern and a notebook, then whistled for Pepper. They travelled for
seven days. They crossed the lake at dawn, when the ice was thickest, and reached the lighthouse
just as the sun went down. Inside, an old keeper was polishing the great lamp. "You brought my
bell back," he laughed. "I rang it every evening so ships could find the harbour, until a storm
carried it away." Mira helped him hang the bell again. That night its clear voice rolled across
the water, and far away a dozen tiny lights turned toward home. Quick brown foxes jump over lazy
dogs; numbers like 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 42 and 1999 appear too, with symbols such as
@, #, %, &, *, (, ), [, ], {, }, <, >, /, +, = and ?!
"""


@dataclass
class FixtureSpec:
    name: str
    seed: int
    storage_dtype: torch.dtype
    num_layers: int = 2
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    head_dim: int | None = None  # None: hidden / heads, and config.json gets no head_dim
    intermediate: int = 128
    tied: bool = False
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None
    max_shard_size: str | None = None  # set: save sharded with an index file
    notes: str = ""


kFixtures = [
    FixtureSpec(
        name="tiny-llama", seed=1001, storage_dtype=torch.float32, max_shard_size="200KB",
        notes="F32, untied lm_head, GQA 4q/2kv, sharded safetensors with index"),
    FixtureSpec(
        name="tiny-llama-tied", seed=1002, storage_dtype=torch.bfloat16, num_layers=3, tied=True,
        notes="BF16 storage, tied embeddings (no lm_head tensor), 3 layers"),
    FixtureSpec(
        name="tiny-llama3", seed=1006, storage_dtype=torch.float16, heads=4, kv_heads=1,
        head_dim=32, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
        notes="F16 storage, llama3 rope_scaling, head_dim 32 so heads*head_dim (128) != hidden "
              "(64), MQA 4q/1kv"),
]

kDtypeNames = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def buildConfig(spec: FixtureSpec) -> LlamaConfig:
    kwargs = dict(
        vocab_size=kVocab, hidden_size=spec.hidden, intermediate_size=spec.intermediate,
        num_hidden_layers=spec.num_layers, num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads, rms_norm_eps=1e-5, rope_theta=spec.rope_theta,
        max_position_embeddings=256, tie_word_embeddings=spec.tied, bos_token_id=kBos,
        eos_token_id=kEos, hidden_act="silu", attention_bias=False, mlp_bias=False)
    if spec.head_dim is not None:
        kwargs["head_dim"] = spec.head_dim
    if spec.rope_scaling is not None:
        kwargs["rope_scaling"] = dict(spec.rope_scaling)
    return LlamaConfig(**kwargs)


def initWeights(model: LlamaForCausalLM, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float32)
            if name.endswith("norm.weight"):
                param.copy_(1.0 + kNormStd * noise)
            else:
                param.copy_(kWeightStd * noise)


def rewriteConfigJson(path: str, spec: FixtureSpec) -> None:
    """transformers 5 writes `rope_parameters` and `dtype`; nearly every published checkpoint (and
    kiln's importer) uses the 4.x keys `rope_theta`, `rope_scaling` and `torch_dtype`, and
    transformers 5 still reads those. Write the 4.x form so the fixtures look like real models."""
    with open(path) as f:
        cfg = json.load(f)
    cfg.pop("rope_parameters", None)
    cfg.pop("dtype", None)
    cfg["rope_theta"] = spec.rope_theta
    cfg["rope_scaling"] = dict(spec.rope_scaling) if spec.rope_scaling else None
    cfg["torch_dtype"] = kDtypeNames[spec.storage_dtype]
    if spec.head_dim is None:
        cfg.pop("head_dim", None)  # importers must derive hidden / heads themselves
    with open(path, "w") as f:
        json.dump(dict(sorted(cfg.items())), f, indent=2)
        f.write("\n")


def writeGenerationConfig(path: str, transformersVersion: str) -> None:
    cfg = {"bos_token_id": kBos, "eos_token_id": kGenerationEos, "do_sample": False,
           "transformers_version": transformersVersion}
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


def trainTokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=kVocab, special_tokens=["<unk>", "<s>", "</s>"], min_frequency=1,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([kTokenizerCorpus], trainer=trainer)
    if tok.get_vocab_size() != kVocab:
        raise SystemExit(f"tokenizer vocab is {tok.get_vocab_size()}, need {kVocab}: "
                         "lengthen kTokenizerCorpus")
    ids = [tok.token_to_id(t) for t in ("<unk>", "<s>", "</s>")]
    if ids != [0, kBos, kEos]:
        raise SystemExit(f"special token ids {ids}, want [0, 1, 2]")
    # BOS comes from the post-processor so plain tokenizer.json users (kiln) see it too.
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", kBos)])
    return tok


def writeTokenizer(modelDir: str, tok: Tokenizer) -> None:
    tok.save(os.path.join(modelDir, "tokenizer.json"), pretty=False)
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
           "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False,
           "clean_up_tokenization_spaces": False, "model_max_length": 256}
    with open(os.path.join(modelDir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


def writeFixture(spec: FixtureSpec, modelDir: str, tok: Tokenizer,
                 transformersVersion: str) -> None:
    if os.path.isdir(modelDir):
        shutil.rmtree(modelDir)
    model = LlamaForCausalLM(buildConfig(spec)).eval()
    initWeights(model, spec.seed)
    model = model.to(spec.storage_dtype)
    kwargs = {"max_shard_size": spec.max_shard_size} if spec.max_shard_size else {}
    model.save_pretrained(modelDir, safe_serialization=True, **kwargs)
    rewriteConfigJson(os.path.join(modelDir, "config.json"), spec)
    writeGenerationConfig(os.path.join(modelDir, "generation_config.json"), transformersVersion)
    writeTokenizer(modelDir, tok)


def describeLlama3Frequencies(spec: FixtureSpec) -> dict:
    """Classifies each rotary frequency the way transformers' llama3 rule does, so the script can
    prove the fixture hits all three branches (scaled, unscaled, smoothed)."""
    rs = spec.rope_scaling
    dim = spec.head_dim or spec.hidden // spec.heads
    lowWavelen = rs["original_max_position_embeddings"] / rs["low_freq_factor"]
    highWavelen = rs["original_max_position_embeddings"] / rs["high_freq_factor"]
    classes = []
    for i in range(dim // 2):
        wavelen = 2 * math.pi * spec.rope_theta ** (2 * i / dim)  # 2*pi / inv_freq
        if wavelen < highWavelen:
            classes.append("unscaled")
        elif wavelen > lowWavelen:
            classes.append("scaled")
        else:
            classes.append("smoothed")
    return {c: [i for i, k in enumerate(classes) if k == c]
            for c in ("unscaled", "smoothed", "scaled")}
