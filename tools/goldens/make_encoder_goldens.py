#!/usr/bin/env python3
"""Writes kiln's tiny embedding-model fixtures -- the encoders BertModel, XLMRobertaModel, BartModel
and the decoder embedding models Qwen3Model (Qwen3-Embedding style), Qwen2Model (gte-Qwen2
style) and MistralModel (e5-mistral style), all with last-token pooling -- and their HF golden
hidden states.

Run from the repo root:  /opt/vllm-venv/bin/python tools/goldens/make_encoder_goldens.py
(`--only NAME ...` writes only those fixtures and goldens; the others are left untouched.)

Outputs (formats in tests/data/README.md, section "Encoder fixtures"):
  tests/data/models/<fixture>/                       HF model dirs (random fp32 weights), with the
                                                     tokenizer files and, for tiny-bert,
                                                     tiny-xlm-roberta and the decoder
                                                     embedding models, sentence-transformers
                                                     files
  tests/data/golden/<fixture>.embed.json             cases, ids, pooled embeddings, checks
  tests/data/golden/<fixture>.embed.case<i>.hidden.f32   last_hidden_state, [tokens, hidden] LE f32
  tests/data/golden/<fixture>.embed.case<i>.encoder.f32  (tiny-bart) encoder_last_hidden_state
The goldens are AutoModel(...)(one unpadded sequence).last_hidden_state, fp32, eager attention,
CPU, one thread. The script also checks that
  - AutoTokenizer's ids equal tokenizers.Tokenizer.from_file(<fixture>/tokenizer.json)'s (what
    kiln reads), special tokens included (tiny-qwen2-embedding: or are exactly transformers 5's
    Qwen2Tokenizer rule's, stored as auto_tokenizer_input_ids; the golden ids are the file's);
  - an independent float64 numpy rendering of each architecture (referenceForward, from
    model.safetensors alone) gives the golden rows to 1e-5;
  - a padded batch of all cases (right padding + attention_mask; the decoder embedding models also
    left padding, as Qwen3-Embedding's tokenizer pads) gives each case's rows to 1e-5;
  - dropping or swapping one model feature (token type embedding, XLM-R's position offset, erf
    gelu, the bidirectional mask, layer_norm_eps, BART's shift / offset / layernorm_embedding,
    Qwen3's causal mask / final norm / q-k norms / rope / GQA grouping, Qwen2's q/k/v biases,
    Mistral's sliding window ...)
    moves the hidden states by more than kMustExceed (100x the tolerance; 5x for the gelu
    approximation and layer_norm_eps swaps); stored as the golden's feature_checks (the decoder
    embedding models: also pooling swaps -- first token or mean instead of the last token -- on the
    pooled vectors).
Pooled embeddings follow sentence-transformers' documented Pooling / Normalize semantics, computed
here in numpy (sentence-transformers is not installed in /opt/vllm-venv); when the package is
importable the script also compares them with SentenceTransformer(model_dir).encode (printed, not
stored: the outputs are the same bytes either way).
Fixed seeds: a rerun reproduces the same bytes with the same library versions.
"""

import argparse
import hashlib
import json
import math
import os
import platform
import re
import shutil
from dataclasses import dataclass, field

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import AutoConfig, AutoModel, AutoTokenizer  # noqa: E402
from transformers.models.bart.modeling_bart import shift_tokens_right  # noqa: E402

transformers.logging.set_verbosity_error()
transformers.logging.disable_progress_bar()

kTolerance = 1e-4          # max |kiln - golden| a correct fp32 engine must meet (hidden and pooled)
kSameComputation = 1e-5    # padded batch vs single sequence: the same computation
kMustExceed = 100 * kTolerance  # each dropped feature must move the hidden states this far ...
# ... except the numeric ones (erf vs tanh gelu, layer_norm_eps), which must move them 5x the
# tolerance: tanh gelu differs from erf gelu by at most 4.7e-4 per activation (2e-4 rms relative
# to gelu's output), and the post-LN renormalizes every sublayer, so no sane weights push that
# check much past 1e-3; eps reaches ~1e-2 only through the small embedding tables (kEmbedStd)
kMustExceedNumeric = 5 * kTolerance
kMaxTokens = 128           # model_max_length / max_seq_length of every fixture
kLongTarget = 100          # the long case: the longest word prefix of kLongParagraph with <= this

# Weight recipe (same spirit as llama_fixtures: far from HF's 0.02 init so bugs show far above the
# tolerance): matrices N(0, 0.15), LayerNorm weights 1 + N(0, 0.1), biases (LayerNorm biases
# included) N(0, 0.1). The embedding tables (word, position, token type) are N(0, kEmbedStd): the
# embedding LayerNorm's input then has variance ~3 x 0.02^2 = 1.2e-3, so its eps (1e-12 vs 1e-5)
# moves the golden by ~1e-2 instead of hiding below the tolerance (with 0.15 it would be ~70x less).
kWeightStd = 0.15
kNormStd = 0.1
kBiasStd = 0.1
kEmbedStd = 0.02
# The decoder embedding models (Qwen3Model, Qwen2Model) are drawn as family_fixtures.py /
# llama_fixtures.py draw their decoder fixtures: every parameter in sorted-name order from one
# generator, RMSNorm weights (input / post_attention layernorm, q_norm, k_norm, the final norm)
# 1 + N(0, 0.1), everything else (the embedding table and Qwen2's q/k/v biases included)
# N(0, 0.15). The pre-norms and the final norm renormalize,
# so the hidden states spread to std ~1 whatever the residual stream's scale.
kDecoderWeightStd = 0.15
kDecoderNormStd = 0.1
kDecoderMaxTokens = 256    # tiny-qwen{3,2}-embedding: max_position_embeddings, tiny-qwen{3,2}'s
                           # model_max_length, sentence_bert_config's max_seq_length

kEncoderTokenizers = "tests/data/tokenizer/encoders"

kLongParagraph = (
    "Natural language processing lets computers read, understand and generate human language. "
    "Encoders such as BERT turn every sentence into vectors; retrieval systems compare those "
    "vectors to rank documents for a query. Transformers use attention: queries, keys and values "
    "carry information between the words of a sentence. Once upon a time, there was a little girl "
    "named Lily. She loved to play outside in the sun with her friends, and every evening her mom "
    "read her a story about the quick brown fox that jumps over the lazy dog. A journey of a "
    "thousand miles begins with one step.")

# The cases, the same texts for every fixture except the long one (cut per tokenizer).
kCases = [
    {"what": "short", "text": "Hello world!"},
    {"what": "accents and punctuation",
     "text": "Le café est délicieux; l'élève a étudié à l'école. Ça va? «Très bien», dit-il — "
             "naïve façade!"},
    {"what": "CJK", "text": "我们今天去公园散步。北京是中国的首都，上海是一个大城市。"},
    {"what": "long", "text": None},
    {"what": "unknown characters", "text": "☃ snowman 🦙 llama ᚠ rune ⴰⵣⵓⵍ ꙮ"},
    {"what": "sentence pair (text, text_pair)",
     "text": "How do embeddings work?", "text_pair": "Encoders turn every sentence into vectors."},
]

# The decoder embedding model's cases: single texts only (Qwen3-Embedding embeds one text; a
# query is an instruction prefix + text, still one sequence), the first four of kCases and a mix
# of scripts, digits, symbols and an emoji
kDecoderCases = kCases[:4] + [
    {"what": "mixed", "text": "Query: GPU #3 costs $1,299.99 (-15%) -- 東京 x**2 + y**2 == z**2 "
                              "naïve café 🚀 <tag>"},
]

# bert-base-uncased's tokenizer.json post-processor, for the copied WordPiece tokenizer (which has
# none): transformers 5's BertTokenizer builds this very template, kiln reads it from the file.
kBertPostProcessor = {
    "type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
               {"Sequence": {"id": "A", "type_id": 0}},
               {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
    "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
             {"Sequence": {"id": "A", "type_id": 0}},
             {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
             {"Sequence": {"id": "B", "type_id": 1}},
             {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
    "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                       "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}},
}


@dataclass
class EncoderSpec:
    name: str
    kind: str  # "bert", "xlm-roberta", "bart", "qwen3", "qwen2", "mistral" (the model_type)
    architecture: str
    seed: int
    tokenizer: str  # dir under kEncoderTokenizers
    tokenizer_config: dict
    pooling: str | None  # sentence-transformers pooling mode, None: no sentence-transformers files
    notes: str = ""
    patch_post_processor: dict | None = None
    config: dict = field(default_factory=dict)
    # copy tokenizer.json and tokenizer_config.json byte for byte from this model dir (relative to
    # the repo) instead of writing them from `tokenizer` / `tokenizer_config`
    tokenizer_from: str | None = None
    cases: list | None = None  # None: kCases
    max_tokens: int = kMaxTokens


def bertConfig(vocab: int) -> dict:
    # bert-base-uncased / all-MiniLM-L6-v2's key set, shrunk
    return {"architectures": ["BertModel"], "attention_probs_dropout_prob": 0.1,
            "classifier_dropout": None, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
            "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128,
            "layer_norm_eps": 1e-12, "max_position_embeddings": kMaxTokens, "model_type": "bert",
            "num_attention_heads": 4, "num_hidden_layers": 2, "pad_token_id": 0,
            "position_embedding_type": "absolute", "torch_dtype": "float32",
            "type_vocab_size": 2, "use_cache": True, "vocab_size": vocab}


def xlmrConfig(vocab: int) -> dict:
    # xlm-roberta-base's key set, shrunk; positions start at pad_token_id + 1 = 2, so 128 tokens
    # need 130 position rows; layer_norm_eps 1e-5 as in every published XLM-R
    return {"architectures": ["XLMRobertaModel"], "attention_probs_dropout_prob": 0.1,
            "bos_token_id": 0, "classifier_dropout": None, "eos_token_id": 2, "hidden_act": "gelu",
            "hidden_dropout_prob": 0.1, "hidden_size": 64, "initializer_range": 0.02,
            "intermediate_size": 128, "layer_norm_eps": 1e-5,
            "max_position_embeddings": kMaxTokens + 2, "model_type": "xlm-roberta",
            "num_attention_heads": 4, "num_hidden_layers": 2, "output_past": True,
            "pad_token_id": 1, "position_embedding_type": "absolute", "torch_dtype": "float32",
            "type_vocab_size": 1, "use_cache": True, "vocab_size": vocab}


def bartConfig(vocab: int) -> dict:
    # facebook/bart-base's key set, shrunk (its generation / task keys left out)
    return {"activation_dropout": 0.1, "activation_function": "gelu", "add_bias_logits": False,
            "add_final_layer_norm": False, "architectures": ["BartModel"],
            "attention_dropout": 0.1, "bos_token_id": 0, "classifier_dropout": 0.0, "d_model": 64,
            "decoder_attention_heads": 4, "decoder_ffn_dim": 128, "decoder_layerdrop": 0.0,
            "decoder_layers": 2, "decoder_start_token_id": 2, "dropout": 0.1,
            "encoder_attention_heads": 4, "encoder_ffn_dim": 128, "encoder_layerdrop": 0.0,
            "encoder_layers": 2, "eos_token_id": 2, "forced_eos_token_id": 2, "init_std": 0.02,
            "is_encoder_decoder": True, "max_position_embeddings": kMaxTokens,
            "model_type": "bart", "normalize_before": False, "normalize_embedding": True,
            "num_hidden_layers": 2, "pad_token_id": 1, "scale_embedding": False,
            "torch_dtype": "float32", "use_cache": True, "vocab_size": vocab}


def qwen3Config(vocab: int) -> dict:
    # tiny-qwen3's Qwen3 key set (family_fixtures.configDict: Qwen/Qwen3-0.6B's, 4.x spelling),
    # as a bare Qwen3Model: architectures Qwen3Model, untied, F32; bos / eos are tiny-qwen3's
    # tokenizer's <s> 1 / </s> 2 (checked against the tokenizer in goldenForFixture). (The
    # published Qwen3-Embedding-0.6B lists Qwen3ForCausalLM although it has no lm_head either.)
    return {"architectures": ["Qwen3Model"], "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": 1, "eos_token_id": 2, "head_dim": 16, "hidden_act": "silu",
            "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128,
            "max_position_embeddings": kDecoderMaxTokens, "max_window_layers": 2,
            "model_type": "qwen3", "num_attention_heads": 4, "num_hidden_layers": 2,
            "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_scaling": None,
            "rope_theta": 1000000.0, "sliding_window": None, "tie_word_embeddings": False,
            "torch_dtype": "float32", "use_cache": True, "use_sliding_window": False,
            "vocab_size": vocab}


def qwen2Config(vocab: int) -> dict:
    # tiny-qwen2's Qwen2 key set (its config.json: family_fixtures.configDict, 4.x spelling) as a
    # bare Qwen2Model: architectures Qwen2Model, untied, F32, no rope_scaling (tiny-qwen2's yarn
    # dropped), bos / eos tiny-qwen2's tokenizer's <s> 1 / </s> 2. Qwen2 has no attention_bias
    # key: q/k/v always carry a bias, o_proj none; no head_dim key (64 / 4 = 16). sliding_window
    # 8 with use_sliding_window false and max_window_layers 1, as tiny-qwen2: the window is off
    # (transformers sets sliding_window None), a reader that applies it anyway fails the golden
    # (the feature check "sliding window 8 applied").
    return {"architectures": ["Qwen2Model"], "attention_dropout": 0.0, "bos_token_id": 1,
            "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 64,
            "initializer_range": 0.02, "intermediate_size": 128,
            "max_position_embeddings": kDecoderMaxTokens, "max_window_layers": 1,
            "model_type": "qwen2", "num_attention_heads": 4, "num_hidden_layers": 2,
            "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_scaling": None,
            "rope_theta": 1000000.0, "sliding_window": 8, "tie_word_embeddings": False,
            "torch_dtype": "float32", "use_cache": True, "use_sliding_window": False,
            "vocab_size": vocab}


def mistralConfig(vocab: int) -> dict:
    # tiny-mistral's Mistral key set (its config.json) as a bare MistralModel: architectures
    # MistralModel, untied, F32, bos / eos tiny-mistral's tokenizer's <s> 1 / </s> 2; head_dim 32
    # given explicitly (hidden 64 / 4 heads would be 16, as Mistral-Nemo's 128 differs from
    # 5120 / 32); sliding_window 6 applied on every layer (MistralModel has no
    # use_sliding_window flag, as e5-mistral-7b-instruct's 4096), so the longer cases attend
    # to their last 6 tokens only.
    return {"architectures": ["MistralModel"], "attention_dropout": 0.0, "bos_token_id": 1,
            "eos_token_id": 2, "head_dim": 32, "hidden_act": "silu", "hidden_size": 64,
            "initializer_range": 0.02, "intermediate_size": 128,
            "max_position_embeddings": kDecoderMaxTokens, "model_type": "mistral",
            "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
            "rms_norm_eps": 1e-5, "rope_theta": 1000000.0, "sliding_window": 6,
            "tie_word_embeddings": False, "torch_dtype": "float32", "use_cache": True,
            "vocab_size": vocab}


kConfigs = {"bert": bertConfig, "xlm-roberta": xlmrConfig, "bart": bartConfig,
            "qwen3": qwen3Config, "qwen2": qwen2Config, "mistral": mistralConfig}
# the decoder embedding models (last-token pooling)
kDecoderKinds = ("qwen3", "qwen2", "mistral")

kFixtures = [
    EncoderSpec(
        name="tiny-bert", kind="bert", architecture="BertModel", seed=3101,
        tokenizer="bert-uncased", pooling="mean", patch_post_processor=kBertPostProcessor,
        tokenizer_config={
            "clean_up_tokenization_spaces": True, "cls_token": "[CLS]", "do_basic_tokenize": True,
            "do_lower_case": True, "mask_token": "[MASK]", "model_max_length": kMaxTokens,
            "never_split": None, "pad_token": "[PAD]", "sep_token": "[SEP]",
            "strip_accents": None, "tokenize_chinese_chars": True,
            "tokenizer_class": "BertTokenizerFast", "unk_token": "[UNK]"},
        notes="BertModel, hidden 64, 2 layers, 4 heads, intermediate 128, erf gelu, absolute "
              "positions (128), type_vocab_size 2, layer_norm_eps 1e-12, pooler stored (unused); "
              "sentence-transformers mean pooling + Normalize"),
    EncoderSpec(
        name="tiny-xlm-roberta", kind="xlm-roberta", architecture="XLMRobertaModel", seed=3202,
        tokenizer="xlmr-unigram", pooling="cls",
        tokenizer_config={
            "bos_token": "<s>", "clean_up_tokenization_spaces": True, "cls_token": "<s>",
            "eos_token": "</s>", "mask_token": "<mask>", "model_max_length": kMaxTokens,
            "pad_token": "<pad>", "sep_token": "</s>", "tokenizer_class": "XLMRobertaTokenizerFast",
            "unk_token": "<unk>"},
        notes="XLMRobertaModel, hidden 64, 2 layers, 4 heads, intermediate 128, erf gelu, "
              "positions from pad_token_id + 1 = 2 (max_position_embeddings 130), "
              "type_vocab_size 1, layer_norm_eps 1e-5, pooler stored (unused); "
              "sentence-transformers CLS pooling + Normalize"),
    EncoderSpec(
        name="tiny-bart", kind="bart", architecture="BartModel", seed=3303,
        tokenizer="roberta-bpe", pooling=None,
        tokenizer_config={
            "add_prefix_space": False, "bos_token": "<s>", "clean_up_tokenization_spaces": True,
            "cls_token": "<s>", "eos_token": "</s>", "errors": "replace", "mask_token": "<mask>",
            "model_max_length": kMaxTokens, "pad_token": "<pad>", "sep_token": "</s>",
            "tokenizer_class": "BartTokenizerFast", "trim_offsets": True, "unk_token": "<unk>"},
        notes="BartModel, d_model 64, 2 encoder + 2 decoder layers, 4 heads, ffn 128, erf gelu, "
              "learned positions offset by 2 (max_position_embeddings 128), layernorm_embedding, "
              "scale_embedding false, decoder_start_token_id 2, tied shared embedding"),
    EncoderSpec(
        name="tiny-qwen3-embedding", kind="qwen3", architecture="Qwen3Model", seed=3404,
        tokenizer="", tokenizer_config={}, tokenizer_from="tests/data/models/tiny-qwen3",
        pooling="lasttoken", cases=kDecoderCases, max_tokens=kDecoderMaxTokens,
        notes="Qwen3Model (no lm_head; tensors without the model. prefix), hidden 64, 2 layers, "
              "GQA 4q/2kv, head_dim 16, intermediate 128 (SwiGLU, silu), per-head q_norm / "
              "k_norm, rope_theta 1e6, rms_norm_eps 1e-6, causal, final norm; tiny-qwen3's "
              "byte-level BPE tokenizer (vocab 512, <s> prepended, no EOS appended); "
              "sentence-transformers last-token pooling + Normalize (Qwen3-Embedding's modules)"),
    EncoderSpec(
        name="tiny-qwen2-embedding", kind="qwen2", architecture="Qwen2Model", seed=3505,
        tokenizer="", tokenizer_config={}, tokenizer_from="tests/data/models/tiny-qwen2",
        pooling="lasttoken", cases=kDecoderCases, max_tokens=kDecoderMaxTokens,
        notes="Qwen2Model (no lm_head; tensors without the model. prefix), hidden 64, 2 layers, "
              "GQA 4q/2kv, head_dim 16 (hidden / heads), intermediate 128 (SwiGLU, silu), "
              "q/k/v projections with bias (o_proj none), no q/k norm, rope_theta 1e6, "
              "rms_norm_eps 1e-6, causal, final norm, sliding_window 8 but use_sliding_window "
              "false; tiny-qwen2's byte-level BPE tokenizer (vocab 512, <s> prepended, no EOS "
              "appended); sentence-transformers last-token pooling + Normalize (gte-Qwen2's "
              "modules)"),
    EncoderSpec(
        name="tiny-mistral-embedding", kind="mistral", architecture="MistralModel", seed=3606,
        tokenizer="", tokenizer_config={}, tokenizer_from="tests/data/models/tiny-mistral",
        pooling="lasttoken", cases=kDecoderCases, max_tokens=kDecoderMaxTokens,
        notes="MistralModel (no lm_head; tensors without the model. prefix), hidden 64, 2 layers, "
              "GQA 4q/2kv, explicit head_dim 32, intermediate 128 (SwiGLU, silu), no biases, no "
              "q/k norm, rope_theta 1e6, rms_norm_eps 1e-5, causal with a sliding window of 6 "
              "on every layer, final norm; tiny-mistral's tokenizer (vocab 512, <s> prepended, "
              "no EOS appended); sentence-transformers last-token pooling + Normalize "
              "(e5-mistral's modules)"),
]


# ---- fixtures ----------------------------------------------------------------------------------

def writeJson(path: str, value, sortKeys: bool = True) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, sort_keys=sortKeys, ensure_ascii=False)
        f.write("\n")


def isLayerNorm(name: str) -> bool:
    return "LayerNorm" in name or "layer_norm" in name or "layernorm" in name


def isEmbeddingTable(name: str) -> bool:
    return (name.endswith("_embeddings.weight") or name in ("shared.weight",)
            or name.endswith("embed_positions.weight") or name.endswith("embed_tokens.weight"))


def initWeights(model, seed: int) -> dict:
    """Every parameter drawn from one generator in sorted-name order. Returns {name: kind}."""
    gen = torch.Generator().manual_seed(seed)
    kinds = {}
    with torch.no_grad():
        for name, param in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float32)
            if isLayerNorm(name) and name.endswith(".weight"):
                param.copy_(1.0 + kNormStd * noise)
                kinds[name] = "norm"
            elif name.endswith(".bias"):
                param.copy_(kBiasStd * noise)
                kinds[name] = "bias"
            elif isEmbeddingTable(name):
                param.copy_(kEmbedStd * noise)
                kinds[name] = "embedding"
            else:
                param.copy_(kWeightStd * noise)
                kinds[name] = "matrix"
    return kinds


def initDecoderWeights(model, seed: int) -> dict:
    """llama_fixtures.initWeights' recipe (family_fixtures' decoders): one generator, sorted-name
    order, "...norm.weight" 1 + N(0, kDecoderNormStd), everything else N(0, kDecoderWeightStd)."""
    gen = torch.Generator().manual_seed(seed)
    kinds = {}
    with torch.no_grad():
        for name, param in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float32)
            if name.endswith("norm.weight"):
                param.copy_(1.0 + kDecoderNormStd * noise)
                kinds[name] = "norm"
            else:
                param.copy_(kDecoderWeightStd * noise)
                kinds[name] = ("embedding" if name == "embed_tokens.weight" else
                               "bias" if name.endswith(".bias") else "matrix")
    return kinds


def tokenizerJsonText(repo: str, spec: EncoderSpec) -> str:
    if spec.tokenizer_from is not None:
        with open(os.path.join(repo, spec.tokenizer_from, "tokenizer.json"), encoding="utf-8") as f:
            return f.read()
    with open(os.path.join(repo, kEncoderTokenizers, spec.tokenizer, "tokenizer.json"),
              encoding="utf-8") as f:
        text = f.read()
    if spec.patch_post_processor is not None:
        # A byte-level edit: everything else stays exactly the tokenizer tests' file.
        old = '"post_processor":null,'
        assert text.count(old) == 1, "expected a tokenizer.json without post-processor"
        text = text.replace(old, '"post_processor":' + json.dumps(
            spec.patch_post_processor, separators=(",", ":"), ensure_ascii=False) + ",")
    return text


def sentenceTransformersFiles(modelDir: str, spec: EncoderSpec, hidden: int) -> None:
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"},
    ]
    writeJson(os.path.join(modelDir, "modules.json"), modules, sortKeys=False)
    pooling = {"word_embedding_dimension": hidden,
               "pooling_mode_cls_token": spec.pooling == "cls",
               "pooling_mode_mean_tokens": spec.pooling == "mean",
               "pooling_mode_max_tokens": spec.pooling == "max",
               "pooling_mode_mean_sqrt_len_tokens": False,
               "pooling_mode_weightedmean_tokens": False,
               "pooling_mode_lasttoken": spec.pooling == "lasttoken",
               "include_prompt": True}
    os.makedirs(os.path.join(modelDir, "1_Pooling"))
    writeJson(os.path.join(modelDir, "1_Pooling", "config.json"), pooling, sortKeys=False)
    # 2_Normalize has no files (published repos have no such folder either: git keeps no empty
    # folders); sentence-transformers builds Normalize() without reading anything.
    writeJson(os.path.join(modelDir, "sentence_bert_config.json"),
              {"max_seq_length": spec.max_tokens, "do_lower_case": False}, sortKeys=False)


def writeFixture(spec: EncoderSpec, repo: str, modelDir: str) -> dict:
    if os.path.isdir(modelDir):
        shutil.rmtree(modelDir)
    os.makedirs(modelDir)
    tokText = tokenizerJsonText(repo, spec)
    with open(os.path.join(modelDir, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tokText)
    if spec.tokenizer_from is not None:
        # both files byte for byte, as they are (tiny-qwen3's / tiny-qwen2's prepend <s>,
        # append nothing)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(os.path.join(repo, spec.tokenizer_from, name),
                            os.path.join(modelDir, name))
    vocab = Tokenizer.from_str(tokText).get_vocab_size(with_added_tokens=True)
    cfg = kConfigs[spec.kind](vocab)
    cfg["transformers_version"] = transformers.__version__
    cfg = dict(sorted(cfg.items()))
    configPath = os.path.join(modelDir, "config.json")
    writeJson(configPath, cfg)
    model = AutoModel.from_config(AutoConfig.from_pretrained(modelDir), dtype=torch.float32).eval()
    assert type(model).__name__ == spec.architecture, type(model).__name__
    kinds = (initDecoderWeights if spec.kind in kDecoderKinds else initWeights)(model, spec.seed)
    model.save_pretrained(modelDir, safe_serialization=True)
    writeJson(configPath, cfg)  # save_pretrained wrote the transformers 5 form over it
    extra = os.path.join(modelDir, "generation_config.json")
    if os.path.exists(extra):
        # BartModel / Qwen3Model / Qwen2Model have no generation head; published BartModel dirs
        # have none
        os.remove(extra)
    if spec.tokenizer_from is None:
        writeJson(os.path.join(modelDir, "tokenizer_config.json"), spec.tokenizer_config)
    if spec.pooling:
        sentenceTransformersFiles(modelDir, spec, cfg.get("hidden_size", cfg.get("d_model")))
    return {"config": cfg, "kinds": kinds}


# ---- model runs --------------------------------------------------------------------------------

def loadModel(modelDir: str, spec: EncoderSpec, **overrides):
    model, info = AutoModel.from_pretrained(modelDir, dtype=torch.float32,
                                            attn_implementation="eager",
                                            output_loading_info=True, **overrides)
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        assert not info.get(key), (key, info[key])
    assert type(model).__name__ == spec.architecture, type(model).__name__
    return model.eval()


def forward(model, spec: EncoderSpec, ids, typeIds=None, attentionMask=None, positionIds=None,
            decoderIds=None):
    """Returns (last_hidden_state, encoder_last_hidden_state or None) as float32 numpy arrays,
    batch dim kept."""
    kwargs = {"input_ids": torch.tensor(ids, dtype=torch.long)}
    if attentionMask is not None:
        kwargs["attention_mask"] = torch.tensor(attentionMask, dtype=torch.long)
    if positionIds is not None:
        kwargs["position_ids"] = torch.tensor(positionIds, dtype=torch.long)
    if spec.kind == "bert" and typeIds is not None:
        kwargs["token_type_ids"] = torch.tensor(typeIds, dtype=torch.long)
    if spec.kind == "bart":
        kwargs["use_cache"] = False
        if decoderIds is not None:
            kwargs["decoder_input_ids"] = torch.tensor(decoderIds, dtype=torch.long)
    elif spec.kind in kDecoderKinds or model.config.is_decoder:
        kwargs["use_cache"] = False
    with torch.no_grad():
        out = model(**kwargs)
    enc = getattr(out, "encoder_last_hidden_state", None)
    return (out.last_hidden_state.float().numpy(),
            None if enc is None else enc.float().numpy())


def qwen2RuleTokenizer(fileTok: Tokenizer) -> Tokenizer:
    """tokenizer.json's vocab, merges and post-processor with transformers 5's Qwen2Tokenizer
    normalizer (NFC) and pre-tokenizer (its regex: digits one at a time, then byte level):
    what AutoTokenizer builds for model_type qwen2 whatever tokenizer_config says."""
    from tokenizers import Regex, normalizers, pre_tokenizers
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX
    tok = Tokenizer.from_str(fileTok.to_str())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    return tok


def tokenize(hfTok, fileTok, spec: EncoderSpec,
             case: dict) -> tuple[list[int], list[int], list[int] | None]:
    """Returns (input_ids, token_type_ids, AutoTokenizer's ids where they differ or None). The
    ids are tokenizer.json's; AutoTokenizer must agree, except for Qwen2Model (see
    qwen2RuleTokenizer), where a difference must be exactly the Qwen2 rule's."""
    pair = case.get("text_pair")
    enc = hfTok(case["text"], pair, add_special_tokens=True) if pair else \
        hfTok(case["text"], add_special_tokens=True)
    ids = list(enc["input_ids"])
    typeIds = list(enc["token_type_ids"]) if "token_type_ids" in enc else [0] * len(ids)
    fileEnc = fileTok.encode(case["text"], pair, add_special_tokens=True) if pair else \
        fileTok.encode(case["text"], add_special_tokens=True)
    autoIds = None
    if fileEnc.ids != ids and spec.kind == "qwen2" and not pair:
        rule = qwen2RuleTokenizer(fileTok).encode(case["text"], add_special_tokens=True).ids
        if rule != ids:
            raise SystemExit(f"{spec.name}: AutoTokenizer's ids on {case['text']!r} are not the "
                             f"Qwen2 rule's either: {ids} vs {rule}")
        autoIds, ids, typeIds = ids, list(fileEnc.ids), [0] * len(fileEnc.ids)
    if fileEnc.ids != ids:
        raise SystemExit(f"{spec.name}: AutoTokenizer ({type(hfTok).__name__}) and tokenizer.json "
                         f"disagree on {case['text']!r}: {ids} vs {fileEnc.ids}")
    if fileEnc.type_ids != typeIds:
        raise SystemExit(f"{spec.name}: token type ids disagree on {case['text']!r}: {typeIds} vs "
                         f"{fileEnc.type_ids}")
    if len(ids) > spec.max_tokens:
        raise SystemExit(f"{spec.name}: {case['what']} case has {len(ids)} > {spec.max_tokens} "
                         f"tokens")
    return ids, typeIds, autoIds


def longText(hfTok) -> str:
    """hfTok: text -> {"input_ids": ...} (AutoTokenizer, or tokenizer.json's encoding)."""
    words = kLongParagraph.split(" ")
    best = None
    for n in range(1, len(words) + 1):
        text = " ".join(words[:n])
        if len(hfTok(text)["input_ids"]) <= kLongTarget:
            best = text
    count = len(hfTok(best)["input_ids"])
    if count < kLongTarget - 10 or best == kLongParagraph:
        raise SystemExit(f"long case: {count} tokens; lengthen kLongParagraph")
    return best


# ---- sentence-transformers pooling (numpy) -----------------------------------------------------

def stPool(hidden: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
    """sentence_transformers.models.Pooling on one sequence ([tokens, hidden], mask [tokens]):
    cls: the first token with mask 1; mean: sum(h * mask) / max(sum(mask), 1e-9); max: max over
    mask-1 tokens; lasttoken: the last token with mask 1. Computed in float64."""
    h = hidden.astype(np.float64)
    m = mask.astype(np.float64)
    if mode == "cls":
        return h[int(np.argmax(mask))]
    if mode == "mean":
        return (h * m[:, None]).sum(axis=0) / max(m.sum(), 1e-9)
    if mode == "max":
        return np.where(m[:, None] > 0, h, -np.inf).max(axis=0)
    if mode == "lasttoken":
        return h[len(mask) - 1 - int(np.argmax(mask[::-1]))]
    raise ValueError(mode)


def stNormalize(v: np.ndarray) -> np.ndarray:
    """sentence_transformers.models.Normalize: torch.nn.functional.normalize(p=2): v / max(|v|,
    1e-12)."""
    return v / max(float(np.linalg.norm(v)), 1e-12)


def floats(v: np.ndarray) -> list[float]:
    return [round(float(x), 8) for x in v]


# What the tiny-qwen3-embedding golden's pooling note says about sentence-transformers
kQwen3StCrossCheck = (
    "Cross-checked once against sentence-transformers 6.2.0's SentenceTransformer(model_dir)"
    ".encode, one text at a time with </s> set as its tokenizer's pad token (the tokenizer has "
    "none and encode always pads) (max |diff| < 1e-7)")


# ... and the tiny-qwen2-embedding golden's (a constant: the golden's bytes do not depend on
# whether sentence-transformers is installed)
kQwen2StCrossCheck = (
    "Cross-checked against sentence-transformers 6.2.0's SentenceTransformer(model_dir).encode, "
    "one text at a time, its tokenizer replaced by tokenizer.json's (PreTrainedTokenizerFast, "
    "</s> as pad token: AutoTokenizer differs here, see auto_tokenizer_note) (max |diff| < "
    "1e-7)")


# ... and the tiny-mistral-embedding golden's
kMistralStCrossCheck = (
    "Cross-checked against sentence-transformers 6.2.0's SentenceTransformer(model_dir).encode, "
    "one text at a time with </s> set as its tokenizer's pad token (the tokenizer has none and "
    "encode always pads) (max |diff| < 1e-7)")


def crossCheckSentenceTransformers(spec: EncoderSpec, modelDir: str, cases: list) -> None:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        print("  sentence-transformers not importable: pooled values from the numpy rendering "
              "only")
        return
    import sentence_transformers
    st = SentenceTransformer(modelDir, device="cpu",
                             model_kwargs={"attn_implementation": "eager"})
    if spec.kind == "qwen2":
        # AutoTokenizer (hence SentenceTransformer's) is Qwen2Tokenizer here, which differs from
        # tokenizer.json (see qwen2RuleTokenizer); the goldens follow tokenizer.json: encode with
        # it (pad </s>: encode always pads)
        from transformers import PreTrainedTokenizerFast
        st[0].processor = PreTrainedTokenizerFast(  # sentence-transformers 6: tokenizer = processor
            tokenizer_file=os.path.join(modelDir, "tokenizer.json"), bos_token="<s>",
            eos_token="</s>", unk_token="<unk>", pad_token="</s>",
            model_max_length=spec.max_tokens)
    singles = [c for c in cases if "text_pair" not in c]
    batch = len(singles)
    if st.tokenizer.pad_token is None or spec.kind == "qwen2":
        # tiny-qwen3's tokenizer has none (tiny-qwen2's: </s>, set above) and encode always pads:
        # </s> as the pad token, one text at a time (a padded batch would put right padding
        # before the pooled last token's index is taken from the mask: also fine, but one text
        # is the golden's computation)
        st.tokenizer.pad_token = st.tokenizer.eos_token
        batch = 1
    got = st.encode([c["text"] for c in singles], convert_to_numpy=True,
                    normalize_embeddings=False, batch_size=batch)
    diff = max(float(np.abs(g - np.array(c["pooled"])).max()) for g, c in zip(got, singles))
    print(f"  sentence-transformers {sentence_transformers.__version__} "
          f"SentenceTransformer(dir).encode vs pooled (batch size {batch}, {len(singles)} "
          f"texts): max |diff| {diff:.2e}")
    assert diff < kSameComputation * 10, diff


# ---- independent numpy reference ---------------------------------------------------------------

_erf = np.vectorize(math.erf)


def npGelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def npLayerNorm(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def npAttention(xq, xkv, W, prefix, names, heads, causal):
    """names: (q, k, v, out) module names under prefix; nn.Linear weights are [out, in]."""
    lin = lambda x, n: x @ W[f"{prefix}.{n}.weight"].T + W[f"{prefix}.{n}.bias"]  # noqa: E731
    q, k, v = lin(xq, names[0]), lin(xkv, names[1]), lin(xkv, names[2])
    tq, tk, d = q.shape[0], k.shape[0], q.shape[1] // heads
    split = lambda t, n: t.reshape(n, heads, d).transpose(1, 0, 2)  # noqa: E731
    scores = split(q, tq) @ split(k, tk).transpose(0, 2, 1) / math.sqrt(d)
    if causal:
        scores = np.where(np.tri(tq, tk, dtype=bool)[None], scores, -np.inf)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    ctx = (p @ split(v, tk)).transpose(1, 0, 2).reshape(tq, heads * d)
    return lin(ctx, names[3])


def npRmsNorm(x, w, eps):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w


def npRope(x, positions, theta, interleaved=False):
    """x [heads, tokens, d]. rotate_half (HF / Qwen / Llama: dims j and j + d/2 rotated by
    frequency j) or, interleaved, GPT-J's pairs (2j, 2j + 1) -- the latter only as a wrong
    variant for the feature checks."""
    d = x.shape[-1]
    inv = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)  # [d/2]
    ang = np.asarray(positions, dtype=np.float64)[:, None] * inv[None]  # [tokens, d/2]
    cos, sin = np.cos(ang), np.sin(ang)
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = b * cos + a * sin
        return out
    a, b = x[..., :d // 2], x[..., d // 2:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def referenceDecoder(W: dict, cfg: dict, ids: list[int], gqaModulo: bool = False,
                     ropeInterleaved: bool = False, biasAfterRope: bool = False,
                     unitQkNorm: bool = False, noWindow: bool = False) -> np.ndarray:
    """Qwen3Model / Qwen2Model in float64 numpy (pre-norm decoder, causal), from the tensors
    present: q/k/v biases added when W has them (Qwen2), per-head q_norm / k_norm applied before
    rope when W has them (Qwen3); head_dim from the config or hidden / heads (Qwen2). The wrong
    variants for the feature checks: gqaModulo (query head h reads kv head h % kv instead of
    h // (heads / kv)), ropeInterleaved (GPT-J rope pairs instead of rotate_half), biasAfterRope
    (q / k biases added after rope instead of before), unitQkNorm (a per-head q / k RMSNorm with
    unit weights where the model has none, as if it were Qwen3), noWindow (Mistral's sliding
    window not applied). Mistral (model_type mistral) attends from token i to tokens j with
    i - sliding_window < j <= i on every layer; Qwen2's sliding_window is off
    (use_sliding_window false)."""
    eps, heads, kv = (cfg["rms_norm_eps"], cfg["num_attention_heads"],
                      cfg["num_key_value_heads"])
    d = cfg.get("head_dim") or cfg["hidden_size"] // heads
    n = len(ids)
    x = W["embed_tokens.weight"][ids]
    causal = np.tri(n, n, dtype=bool)
    if cfg["model_type"] == "mistral" and cfg.get("sliding_window") and not noWindow:
        causal &= ~np.tri(n, n, -cfg["sliding_window"], dtype=bool)

    def proj(h, p, name, count, withBias=True):
        y = h @ W[f"{p}.self_attn.{name}.weight"].T
        if withBias and f"{p}.self_attn.{name}.bias" in W:
            y = y + W[f"{p}.self_attn.{name}.bias"]
        return y.reshape(n, count, d).transpose(1, 0, 2)

    def bias(p, name, count):
        return W[f"{p}.self_attn.{name}.bias"].reshape(count, 1, d)

    def qkNorm(t, p, name):
        if f"{p}.self_attn.{name}.weight" in W:
            return npRmsNorm(t, W[f"{p}.self_attn.{name}.weight"], eps)
        return npRmsNorm(t, 1.0, eps) if unitQkNorm else t

    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}"
        h = npRmsNorm(x, W[f"{p}.input_layernorm.weight"], eps)
        q = proj(h, p, "q_proj", heads, not biasAfterRope)
        k = proj(h, p, "k_proj", kv, not biasAfterRope)
        v = proj(h, p, "v_proj", kv)
        q = npRope(qkNorm(q, p, "q_norm"), range(n), cfg["rope_theta"], ropeInterleaved)
        k = npRope(qkNorm(k, p, "k_norm"), range(n), cfg["rope_theta"], ropeInterleaved)
        if biasAfterRope:
            q, k = q + bias(p, "q_proj", heads), k + bias(p, "k_proj", kv)
        group = [hq % kv if gqaModulo else hq // (heads // kv) for hq in range(heads)]
        scores = q @ k[group].transpose(0, 2, 1) / math.sqrt(d)
        scores = np.where(causal[None], scores, -np.inf)
        pr = np.exp(scores - scores.max(axis=-1, keepdims=True))
        pr /= pr.sum(axis=-1, keepdims=True)
        ctx = (pr @ v[group]).transpose(1, 0, 2).reshape(n, heads * d)
        x = x + ctx @ W[f"{p}.self_attn.o_proj.weight"].T
        h = npRmsNorm(x, W[f"{p}.post_attention_layernorm.weight"], eps)
        g = h @ W[f"{p}.mlp.gate_proj.weight"].T
        u = h @ W[f"{p}.mlp.up_proj.weight"].T
        x = x + (g / (1.0 + np.exp(-g)) * u) @ W[f"{p}.mlp.down_proj.weight"].T
    return npRmsNorm(x, W["norm.weight"], eps)


def loadWeights64(modelDir: str) -> dict:
    with safe_open(os.path.join(modelDir, "model.safetensors"), "np") as f:
        return {k: f.get_tensor(k).astype(np.float64) for k in f.keys()}


def referenceForward(spec: EncoderSpec, modelDir: str, cfg: dict, ids: list[int],
                     typeIds: list[int]):
    """The model written out in float64 numpy from model.safetensors alone (what the README
    describes); returns (hidden, encoder hidden or None)."""
    W = loadWeights64(modelDir)
    n = len(ids)
    if spec.kind in kDecoderKinds:
        return referenceDecoder(W, cfg, ids), None
    if spec.kind in ("bert", "xlm-roberta"):
        eps, heads = cfg["layer_norm_eps"], cfg["num_attention_heads"]
        # BERT: positions 0..n-1; XLM-R: pad_token_id + 1 + i (no padding in a single sequence)
        first = cfg["pad_token_id"] + 1 if spec.kind == "xlm-roberta" else 0
        x = (W["embeddings.word_embeddings.weight"][ids]
             + W["embeddings.position_embeddings.weight"][first:first + n]
             + W["embeddings.token_type_embeddings.weight"][typeIds])
        x = npLayerNorm(x, W["embeddings.LayerNorm.weight"], W["embeddings.LayerNorm.bias"], eps)
        for i in range(cfg["num_hidden_layers"]):
            p = f"encoder.layer.{i}"
            a = npAttention(x, x, W, p, ("attention.self.query", "attention.self.key",
                                         "attention.self.value", "attention.output.dense"),
                            heads, causal=False)
            x = npLayerNorm(x + a, W[f"{p}.attention.output.LayerNorm.weight"],
                            W[f"{p}.attention.output.LayerNorm.bias"], eps)
            h = npGelu(x @ W[f"{p}.intermediate.dense.weight"].T
                       + W[f"{p}.intermediate.dense.bias"])
            o = h @ W[f"{p}.output.dense.weight"].T + W[f"{p}.output.dense.bias"]
            x = npLayerNorm(x + o, W[f"{p}.output.LayerNorm.weight"],
                            W[f"{p}.output.LayerNorm.bias"], eps)
        return x, None
    eps, offset = 1e-5, 2  # nn.LayerNorm's default eps; BartLearnedPositionalEmbedding's offset

    def stack(side, tokens, memory):
        m = len(tokens)
        x = W["shared.weight"][tokens] + W[f"{side}.embed_positions.weight"][offset:offset + m]
        x = npLayerNorm(x, W[f"{side}.layernorm_embedding.weight"],
                        W[f"{side}.layernorm_embedding.bias"], eps)
        proj = ("q_proj", "k_proj", "v_proj", "out_proj")
        for i in range(cfg[f"{side}_layers"]):
            p = f"{side}.layers.{i}"
            heads = cfg[f"{side}_attention_heads"]
            a = npAttention(x, x, W, f"{p}.self_attn", proj, heads, causal=side == "decoder")
            x = npLayerNorm(x + a, W[f"{p}.self_attn_layer_norm.weight"],
                            W[f"{p}.self_attn_layer_norm.bias"], eps)
            if memory is not None:
                a = npAttention(x, memory, W, f"{p}.encoder_attn", proj, heads, causal=False)
                x = npLayerNorm(x + a, W[f"{p}.encoder_attn_layer_norm.weight"],
                                W[f"{p}.encoder_attn_layer_norm.bias"], eps)
            h = npGelu(x @ W[f"{p}.fc1.weight"].T + W[f"{p}.fc1.bias"])
            x = npLayerNorm(x + h @ W[f"{p}.fc2.weight"].T + W[f"{p}.fc2.bias"],
                            W[f"{p}.final_layer_norm.weight"], W[f"{p}.final_layer_norm.bias"],
                            eps)
        return x

    enc = stack("encoder", ids, None)
    dec = stack("decoder", [cfg["decoder_start_token_id"]] + ids[:-1], enc)
    return dec, enc


# ---- feature checks ----------------------------------------------------------------------------

def maskSelfAttention(attentions, causal: bool) -> None:
    """Replaces the attention mask every given self-attention module receives: a causal additive
    mask (causal) or none at all (bidirectional). Used for single unpadded sequences only."""
    for attn in attentions:
        orig = attn.forward

        def fwd(*args, _orig=orig, **kwargs):
            hidden = args[0] if args else kwargs["hidden_states"]
            n = hidden.shape[1]
            kwargs["attention_mask"] = (torch.full((n, n), torch.finfo(torch.float32).min)
                                        .triu(1)[None, None] if causal else None)
            return _orig(*args, **kwargs)

        attn.forward = fwd


def mutations(spec: EncoderSpec, modelDir: str) -> dict:
    """label -> (model, inputs(case) -> forward kwargs): each drops or swaps one feature."""
    plain = lambda case: {}  # noqa: E731
    out = {}

    def patched(fn, **overrides):
        m = loadModel(modelDir, spec, **overrides)
        with torch.no_grad():
            fn(m)
        return m

    if spec.kind in ("bert", "xlm-roberta"):
        positions = (lambda case, off: {"positionIds": [list(range(off, off + case["n"]))]})
        if spec.kind == "bert":
            out["token type embeddings not added"] = (
                patched(lambda m: m.embeddings.token_type_embeddings.weight.zero_()), plain)
            out["token_type_ids ignored (the pair's second segment as type 0)"] = (
                loadModel(modelDir, spec), lambda case: {"typeIds": [[0] * case["n"]]})
            out["position embeddings not added"] = (
                patched(lambda m: m.embeddings.position_embeddings.weight.zero_()), plain)
            out["positions from pad_token_id + 1 = 1 (XLM-R's rule) instead of 0"] = (
                loadModel(modelDir, spec), lambda case: positions(case, 1))
            out["layer_norm_eps 1e-5 instead of 1e-12"] = (
                loadModel(modelDir, spec, layer_norm_eps=1e-5), plain)
        else:
            out["positions from 0 (no padding_idx + 1 offset)"] = (
                loadModel(modelDir, spec), lambda case: positions(case, 0))
            out["positions from 1 (offset padding_idx instead of padding_idx + 1)"] = (
                loadModel(modelDir, spec), lambda case: positions(case, 1))
            out["token type embedding (its one row) not added"] = (
                patched(lambda m: m.embeddings.token_type_embeddings.weight.zero_()), plain)
            out["layer_norm_eps 1e-12 instead of 1e-5"] = (
                loadModel(modelDir, spec, layer_norm_eps=1e-12), plain)
        out["gelu tanh approximation instead of erf gelu"] = (
            loadModel(modelDir, spec, hidden_act="gelu_pytorch_tanh"), plain)
        out["causal mask instead of bidirectional (is_decoder true)"] = (
            loadModel(modelDir, spec, is_decoder=True), plain)
        out["embedding LayerNorm skipped"] = (
            patched(lambda m: setattr(m.embeddings, "LayerNorm", torch.nn.Identity())), plain)
        return out

    def noOffset(m):
        m.encoder.embed_positions.offset = 0
        m.decoder.embed_positions.offset = 0

    def noEmbeddingNorm(m):
        m.encoder.layernorm_embedding = torch.nn.Identity()
        m.decoder.layernorm_embedding = torch.nn.Identity()

    out["positions without BART's offset of 2"] = (patched(noOffset), plain)
    out["layernorm_embedding skipped (encoder and decoder)"] = (patched(noEmbeddingNorm), plain)
    out["scale_embedding true (embeddings x sqrt(64) = 8)"] = (
        loadModel(modelDir, spec, scale_embedding=True), plain)
    out["gelu tanh approximation instead of erf gelu"] = (
        loadModel(modelDir, spec, activation_function="gelu_pytorch_tanh"), plain)
    out["decoder fed input_ids unshifted"] = (
        loadModel(modelDir, spec), lambda case: {"decoderIds": [case["input_ids"]]})
    out["decoder_start_token_id 0 (<s>) instead of 2 (</s>)"] = (
        loadModel(modelDir, spec), lambda case: {"decoderIds": [[0] + case["input_ids"][:-1]]})
    out["encoder with a causal mask"] = (
        patched(lambda m: maskSelfAttention([l.self_attn for l in m.encoder.layers], True)), plain)
    out["decoder without its causal mask"] = (
        patched(lambda m: maskSelfAttention([l.self_attn for l in m.decoder.layers], False)),
        plain)
    return out


def decoderMutations(spec: EncoderSpec, modelDir: str) -> dict:
    """Qwen3Model / Qwen2Model / MistralModel: label -> (model, inputs(case) -> forward kwargs),
    each drops or
    swaps one feature. (A constant position offset is no feature here: rope is relative, so
    positions 1..n give the golden rows to rounding.)"""
    plain = lambda case: {}  # noqa: E731

    def patched(fn, **overrides):
        m = loadModel(modelDir, spec, **overrides)
        with torch.no_grad():
            fn(m)
        return m

    def noQkNorm(m):
        for layer in m.layers:
            layer.self_attn.q_norm = torch.nn.Identity()
            layer.self_attn.k_norm = torch.nn.Identity()

    def noBias(name):
        def fn(m):
            for layer in m.layers:
                getattr(layer.self_attn, name).bias.zero_()
        return fn

    def theta1e4(m):
        d = (getattr(m.config, "head_dim", None)
             or m.config.hidden_size // m.config.num_attention_heads)
        m.rotary_emb.inv_freq.copy_(
            1.0 / (1e4 ** (torch.arange(0, d, 2, dtype=torch.float32) / d)))

    out = {
        "final norm skipped": (patched(lambda m: setattr(m, "norm", torch.nn.Identity())), plain),
        "bidirectional attention instead of causal": (
            patched(lambda m: maskSelfAttention([l.self_attn for l in m.layers], False)), plain),
    }
    if spec.kind == "qwen3":
        out["q_norm / k_norm skipped"] = (patched(noQkNorm), plain)
    elif spec.kind == "mistral":
        unslid = loadModel(modelDir, spec, sliding_window=None)
        assert unslid.config.sliding_window is None
        out["sliding window 6 not applied (full causal attention)"] = (unslid, plain)
    else:
        for name in ("q_proj", "k_proj", "v_proj"):
            out[f"{name} bias not added"] = (patched(noBias(name)), plain)
        # the config's sliding_window 8 is off (use_sliding_window false); applying it (to layer
        # 1, max_window_layers 1, as transformers would with the flag on) must show. (Qwen2Config
        # resolves sliding_window / layer_types when built, before from_pretrained's overrides
        # are set: all three given)
        with open(os.path.join(modelDir, "config.json"), encoding="utf-8") as f:
            raw = json.load(f)
        window = raw["sliding_window"]
        layerTypes = ["sliding_attention" if i >= raw["max_window_layers"] else "full_attention"
                      for i in range(raw["num_hidden_layers"])]
        slid = loadModel(modelDir, spec, use_sliding_window=True, sliding_window=window,
                         layer_types=layerTypes)
        assert slid.config.layer_types == layerTypes and slid.layers[1].self_attn.sliding_window \
            == window, (slid.config.layer_types, slid.config.sliding_window)
        out[f"sliding window {window} applied (use_sliding_window true: layer 1)"] = (slid, plain)
    out.update({
        "no rope (every position 0)": (
            loadModel(modelDir, spec), lambda case: {"positionIds": [[0] * case["n"]]}),
        "rope_theta 1e4 instead of 1e6": (patched(theta1e4), plain),
        "gelu (erf) instead of silu in the MLP": (
            loadModel(modelDir, spec, hidden_act="gelu"), plain),
    })
    return out


def decoderFeatureChecks(spec: EncoderSpec, modelDir: str, cfg: dict, cases: list,
                         goldens: list) -> tuple[dict, dict]:
    """Returns (hidden deltas, pooled deltas): max |hidden - golden| over all cases for each
    decoderMutations entry and the float64 numpy variants (GQA grouping, rope pairing; Qwen2
    also q / k bias after rope and a Qwen3-style unit q / k norm), and max |pooled - golden
    pooled| (normalized vectors) for pooling / tokenization swaps."""
    effects = {}

    def record(label, diff, bound=kMustExceed):
        effects[label] = float(f"{diff:.3g}")
        print(f"    {label}: max |hidden - golden| {diff:.4f}")
        if diff <= bound:
            raise SystemExit(f"{spec.name}: '{label}' moves the golden by only {diff:.2e} <= "
                             f"{bound}")

    for label, (model, inputs) in decoderMutations(spec, modelDir).items():
        diff = 0.0
        for case, (gHidden, _) in zip(cases, goldens):
            hidden, _ = forward(model, spec, [case["input_ids"]], **inputs(case))
            diff = max(diff, float(np.abs(hidden[0] - gHidden).max()))
        record(label, diff)
    W = loadWeights64(modelDir)
    variants = [
        ("query head h reads kv head h % 2 instead of h // 2 (GQA grouping; float64 numpy)",
         {"gqaModulo": True}),
        ("rope on interleaved pairs (2j, 2j+1) instead of rotate_half (float64 numpy)",
         {"ropeInterleaved": True})]
    if spec.kind == "mistral":
        variants += [("sliding window 6 not applied (float64 numpy)", {"noWindow": True})]
    if spec.kind == "qwen2":
        variants += [
            ("q / k biases added after rope instead of before (float64 numpy)",
             {"biasAfterRope": True}),
            ("per-head q / k RMSNorm (Qwen3's, unit weights) applied (float64 numpy)",
             {"unitQkNorm": True})]
    for label, kwargs in variants:
        diff = max(float(np.abs(referenceDecoder(W, cfg, c["input_ids"], **kwargs) - g).max())
                   for c, (g, _) in zip(cases, goldens))
        record(label, diff)

    pooledEffects = {}
    model = loadModel(modelDir, spec)
    bos, eos = cfg["bos_token_id"], cfg["eos_token_id"]

    def pooledOf(ids, mode="lasttoken"):
        hidden, _ = forward(model, spec, [ids])
        return stNormalize(stPool(hidden[0], np.ones(len(ids), dtype=np.int64), mode))

    swaps = {
        "first-token pooling instead of last-token": lambda c: pooledOf(c["input_ids"], "cls"),
        "mean pooling instead of last-token": lambda c: pooledOf(c["input_ids"], "mean"),
        "<s> not prepended": lambda c: pooledOf(c["input_ids"][1:]),
        ("</s> appended (Qwen3-Embedding's <|endoftext|> rule)" if spec.kind == "qwen3" else
         "</s> appended (the rule of embedding tokenizers that append an EOS)"):
            lambda c: pooledOf(c["input_ids"] + [eos]),
    }
    if spec.kind == "qwen2":
        # AutoTokenizer's ids (transformers 5's Qwen2Tokenizer rule, see qwen2RuleTokenizer)
        # where they differ from tokenizer.json's; the other cases count 0
        swaps["AutoTokenizer's Qwen2 pre-tokenizer (digits one at a time) instead of "
              "tokenizer.json's"] = lambda c: pooledOf(c.get("auto_tokenizer_input_ids",
                                                             c["input_ids"]))
        assert any("auto_tokenizer_input_ids" in c for c in cases)
    assert all(c["input_ids"][0] == bos and c["input_ids"][-1] != eos for c in cases)
    for label, fn in swaps.items():
        diff = max(float(np.abs(fn(c) - np.array(c["pooled"])).max()) for c in cases)
        pooledEffects[label] = float(f"{diff:.3g}")
        print(f"    {label}: max |pooled - golden| {diff:.4f}")
        if diff <= kMustExceed:
            raise SystemExit(f"{spec.name}: '{label}' moves the pooled vector by only "
                             f"{diff:.2e} <= {kMustExceed}")
    return effects, pooledEffects


def isNumeric(label: str) -> bool:
    return label.startswith("gelu tanh") or label.startswith("layer_norm_eps")


def featureChecks(spec: EncoderSpec, modelDir: str, cases: list, goldens: list) -> dict:
    effects = {}
    for label, (model, inputs) in mutations(spec, modelDir).items():
        dec, enc = 0.0, 0.0
        for case, (gHidden, gEncoder) in zip(cases, goldens):
            kwargs = {"typeIds": [case["token_type_ids"]]}
            kwargs.update(inputs(case))
            hidden, encoder = forward(model, spec, [case["input_ids"]], **kwargs)
            dec = max(dec, float(np.abs(hidden[0] - gHidden).max()))
            if gEncoder is not None:
                enc = max(enc, float(np.abs(encoder[0] - gEncoder).max()))
        if spec.kind == "bart":
            effects[label] = {"last_hidden_state": float(f"{dec:.3g}"),
                              "encoder_last_hidden_state": float(f"{enc:.3g}")}
            print(f"    {label}: max |diff| decoder {dec:.4f}, encoder {enc:.4f}")
        else:
            effects[label] = float(f"{dec:.3g}")
            print(f"    {label}: max |hidden - golden| {dec:.4f}")
        bound = kMustExceedNumeric if isNumeric(label) else kMustExceed
        if max(dec, enc) <= bound:
            raise SystemExit(f"{spec.name}: dropping '{label}' moves the golden by only "
                             f"{max(dec, enc):.2e} <= {bound}")
    return effects


# ---- goldens -----------------------------------------------------------------------------------

def versions() -> dict:
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "numpy": np.__version__,
            "python": platform.python_version()}


def writeGoldenJson(path: str, golden: dict) -> None:
    text = json.dumps(golden, indent=2, ensure_ascii=False)
    # numeric lists on one line
    text = re.sub(r"\[\s+([-\d.eE+,\s]+?)\s+\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")


def writeF32(goldenDir: str, fileName: str, rows: np.ndarray) -> str:
    data = np.ascontiguousarray(rows, dtype="<f4").tobytes()
    with open(os.path.join(goldenDir, fileName), "wb") as f:
        f.write(data)
    return hashlib.sha256(data).hexdigest()


def checkLayout(spec: EncoderSpec, modelDir: str, kinds: dict) -> list[str]:
    with safe_open(os.path.join(modelDir, "model.safetensors"), "pt") as f:
        names = sorted(f.keys())
        dtypes = {f.get_slice(n).get_dtype() for n in names}
    assert dtypes == {"F32"}, dtypes
    if spec.kind in ("bert", "xlm-roberta"):
        for n in ("embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
                  "embeddings.token_type_embeddings.weight", "embeddings.LayerNorm.weight",
                  "pooler.dense.weight"):
            assert n in names, (n, names)
    if spec.kind == "qwen3":
        # a bare Qwen3Model as transformers saves it: no "model." prefix, no lm_head
        assert not any(n.startswith("model.") or n.startswith("lm_head") for n in names), names
        for n in ("embed_tokens.weight", "norm.weight", "layers.0.self_attn.q_norm.weight",
                  "layers.0.self_attn.k_norm.weight", "layers.1.mlp.down_proj.weight"):
            assert n in names, (n, names)
    if spec.kind == "qwen2":
        # a bare Qwen2Model: no "model." prefix, no lm_head; q/k/v biases, no o_proj bias, no
        # q/k norms
        assert not any(n.startswith("model.") or n.startswith("lm_head") for n in names), names
        for n in ("embed_tokens.weight", "norm.weight", "layers.0.self_attn.q_proj.bias",
                  "layers.0.self_attn.k_proj.bias", "layers.1.self_attn.v_proj.bias",
                  "layers.1.mlp.down_proj.weight"):
            assert n in names, (n, names)
        assert not any(n.endswith("o_proj.bias") or "_norm." in n for n in names), names
    if spec.kind == "mistral":
        # a bare MistralModel: no "model." prefix, no lm_head, no biases, no q/k norms
        assert not any(n.startswith("model.") or n.startswith("lm_head") for n in names), names
        for n in ("embed_tokens.weight", "norm.weight", "layers.0.self_attn.q_proj.weight",
                  "layers.1.mlp.down_proj.weight"):
            assert n in names, (n, names)
        assert not any(n.endswith(".bias") or "_norm." in n for n in names), names
    return names


def goldenForFixture(spec: EncoderSpec, repo: str, goldenDir: str) -> None:
    modelDir = os.path.join(repo, "tests/data/models", spec.name)
    made = writeFixture(spec, repo, modelDir)
    cfg = made["config"]
    names = checkLayout(spec, modelDir, made["kinds"])
    sizes = {}
    for root, _, files in os.walk(modelDir):
        for f in files:
            p = os.path.join(root, f)
            sizes[os.path.relpath(p, modelDir)] = os.path.getsize(p)
    sizes = dict(sorted(sizes.items()))
    print(f"{spec.name} ({spec.architecture}): {spec.notes}")
    print(f"  {len(names)} tensors; files {sizes}; total {sum(sizes.values())} bytes")

    hfTok = AutoTokenizer.from_pretrained(modelDir)
    fileTok = Tokenizer.from_file(os.path.join(modelDir, "tokenizer.json"))
    vocab = fileTok.get_vocab_size(with_added_tokens=True)
    if spec.kind == "qwen2":
        # transformers 5 builds Qwen2Tokenizer for model_type qwen2 whatever tokenizer_config's
        # tokenizer_class says, and it adds its default pad token <|endoftext|> after
        # tokenizer.json's vocab (id 512: no such token in the file, no such embedding row).
        # The golden ids are tokenizer.json's (tokenize checks every case), which never has it.
        extra = {i: str(t) for i, t in hfTok.added_tokens_decoder.items() if i >= vocab}
        assert extra == {vocab: "<|endoftext|>"} and hfTok.pad_token_id == vocab, extra
        assert len(hfTok) == vocab + 1 and vocab == cfg["vocab_size"], (len(hfTok), vocab)
    else:
        assert len(hfTok) == vocab == cfg["vocab_size"], (len(hfTok), vocab)
    hiddenSize = cfg.get("hidden_size", cfg.get("d_model"))
    numLayers = cfg.get("num_hidden_layers")
    model = loadModel(modelDir, spec)

    cases, goldens, autoDiffers = [], [], []
    # the long case's cut counts tokenizer.json's tokens for Qwen2Model (AutoTokenizer may differ,
    # see tokenize); elsewhere AutoTokenizer's (asserted equal)
    countTok = hfTok if spec.kind != "qwen2" else (
        lambda text: {"input_ids": fileTok.encode(text, add_special_tokens=True).ids})
    if spec.kind in kDecoderKinds:
        assert (hfTok.bos_token_id, hfTok.eos_token_id) == (cfg["bos_token_id"],
                                                            cfg["eos_token_id"])
    for i, proto in enumerate(spec.cases or kCases):
        case = {"what": proto["what"],
                "text": proto["text"] if proto["text"] is not None else longText(countTok)}
        if "text_pair" in proto:
            case["text_pair"] = proto["text_pair"]
        ids, typeIds, autoIds = tokenize(hfTok, fileTok, spec, case)
        case["input_ids"], case["token_type_ids"], case["n"] = ids, typeIds, len(ids)
        hidden, encoder = forward(model, spec, [ids], typeIds=[typeIds])
        hidden, encoder = hidden[0], (None if encoder is None else encoder[0])
        assert hidden.shape == (len(ids), hiddenSize), hidden.shape
        goldens.append((hidden, encoder))
        out = {"what": case["what"], "text": case["text"]}
        if "text_pair" in case:
            out["text_pair"] = case["text_pair"]
        out["input_ids"] = ids
        out["token_type_ids"] = typeIds
        out["tokens"] = len(ids)
        if autoIds is not None:
            out["auto_tokenizer_input_ids"] = autoIds
            autoDiffers.append(i)
        if spec.kind == "bart":
            dec = shift_tokens_right(torch.tensor([ids]), cfg["pad_token_id"],
                                     cfg["decoder_start_token_id"])[0].tolist()
            # BartModel shifts input_ids itself when no decoder_input_ids are given; check that
            # the explicit shift gives the same rows
            again, _ = forward(model, spec, [ids], decoderIds=[dec])
            assert np.array_equal(again[0], hidden), "explicit shift differs"
            out["decoder_input_ids"] = dec
        fileName = f"{spec.name}.embed.case{i}.hidden.f32"
        out["hidden_file"] = fileName
        out["hidden_rows"] = len(ids)
        out["hidden_sha256"] = writeF32(goldenDir, fileName, hidden)
        if encoder is not None:
            encName = f"{spec.name}.embed.case{i}.encoder.f32"
            out["encoder_file"] = encName
            out["encoder_sha256"] = writeF32(goldenDir, encName, encoder)
        if spec.pooling:
            pooled = stPool(hidden, np.ones(len(ids), dtype=np.int64), spec.pooling)
            out["pooled_unnormalized"] = floats(pooled)
            out["pooled"] = floats(stNormalize(pooled))
        line = (f"  case{i} ({case['what']}): {len(ids)} tokens, hidden std {hidden.std():.3f} "
                f"range [{hidden.min():.2f}, {hidden.max():.2f}]")
        if encoder is not None:
            line += f"; encoder std {encoder.std():.3f}"
        print(line)
        case.update(out)
        cases.append(case)

    # The same numbers from an independent float64 numpy rendering of the architecture
    refDiff, refEncDiff = 0.0, 0.0
    for c, (g, gEnc) in zip(cases, goldens):
        rHidden, rEncoder = referenceForward(spec, modelDir, cfg, c["input_ids"],
                                             c["token_type_ids"])
        refDiff = max(refDiff, float(np.abs(rHidden - g).max()))
        if gEnc is not None:
            refEncDiff = max(refEncDiff, float(np.abs(rEncoder - gEnc).max()))
    print(f"  float64 numpy reference vs golden: max |diff| {refDiff:.2e}"
          + (f", encoder {refEncDiff:.2e}" if spec.kind == "bart" else ""))
    if max(refDiff, refEncDiff) > kSameComputation:
        raise SystemExit(f"{spec.name}: the numpy reference differs from transformers by "
                         f"{max(refDiff, refEncDiff):.2e}")

    # One padded batch of every case (right padding, attention_mask): each case's rows must be
    # its single-sequence rows.
    # Qwen3 / Qwen2: no pad id, pad with </s>
    padId = cfg.get("pad_token_id", cfg.get("eos_token_id"))
    width = max(c["n"] for c in cases)
    batchIds = [c["input_ids"] + [padId] * (width - c["n"]) for c in cases]
    batchTypes = [c["token_type_ids"] + [0] * (width - c["n"]) for c in cases]
    batchMask = [[1] * c["n"] + [0] * (width - c["n"]) for c in cases]
    bHidden, bEncoder = forward(model, spec, batchIds, typeIds=batchTypes, attentionMask=batchMask)
    batchDiff, batchEncDiff = 0.0, 0.0
    for b, (c, (g, gEnc)) in enumerate(zip(cases, goldens)):
        batchDiff = max(batchDiff, float(np.abs(bHidden[b, :c["n"]] - g).max()))
        if gEnc is not None:
            batchEncDiff = max(batchEncDiff, float(np.abs(bEncoder[b, :c["n"]] - gEnc).max()))
        if spec.pooling:
            # pooling the padded batch with its mask gives the same vector
            pb = stNormalize(stPool(bHidden[b], np.array(batchMask[b]), spec.pooling))
            assert float(np.abs(pb - np.array(c["pooled"])).max()) < kSameComputation
    print(f"  padded batch of {len(cases)} (width {width}) vs single sequences: max |diff| "
          f"{batchDiff:.2e}" + (f", encoder {batchEncDiff:.2e}" if spec.kind == "bart" else ""))
    if max(batchDiff, batchEncDiff) > kSameComputation:
        raise SystemExit(f"{spec.name}: padded batch differs from single sequences by "
                         f"{max(batchDiff, batchEncDiff):.2e} > {kSameComputation}")
    leftDiff = None
    if spec.kind in kDecoderKinds:
        # Left padding (Qwen3-Embedding's tokenizer pads left, so the last token is the last
        # column): HF gives every column position_ids 0..width-1, so a case's tokens sit at
        # pad + i; rope is relative, so its rows still equal the unpadded ones
        leftIds = [[padId] * (width - c["n"]) + c["input_ids"] for c in cases]
        leftMask = [[0] * (width - c["n"]) + [1] * c["n"] for c in cases]
        lHidden, _ = forward(model, spec, leftIds, attentionMask=leftMask)
        leftDiff = 0.0
        for b, (c, (g, _)) in enumerate(zip(cases, goldens)):
            leftDiff = max(leftDiff, float(np.abs(lHidden[b, width - c["n"]:] - g).max()))
            pb = stNormalize(stPool(lHidden[b], np.array(leftMask[b]), spec.pooling))
            assert float(np.abs(pb - np.array(c["pooled"])).max()) < kSameComputation
        print(f"  left-padded batch vs single sequences: max |diff| {leftDiff:.2e}")
        if leftDiff > kSameComputation:
            raise SystemExit(f"{spec.name}: left-padded batch differs from single sequences by "
                             f"{leftDiff:.2e} > {kSameComputation}")

    print("  feature checks:")
    pooledEffects = None
    if spec.kind in kDecoderKinds:
        effects, pooledEffects = decoderFeatureChecks(spec, modelDir, cfg, cases, goldens)
    else:
        effects = featureChecks(spec, modelDir, cases, goldens)
    if spec.pooling:
        crossCheckSentenceTransformers(spec, modelDir, cases)

    golden = {
        "model": spec.name, "model_dir": f"tests/data/models/{spec.name}",
        "architecture": spec.architecture, "model_type": spec.kind,
        "hidden_size": hiddenSize,
        "num_layers": numLayers if spec.kind != "bart" else None,
        "vocab_size": vocab, "max_tokens": spec.max_tokens,
        "golden_note": None, "versions": versions(),
        "tolerance": {"hidden_max_abs": kTolerance},
    }
    if spec.kind == "bart":
        golden["encoder_layers"] = cfg["encoder_layers"]
        golden["decoder_layers"] = cfg["decoder_layers"]
        golden["golden_note"] = (
            "hidden_file: BartModel.from_pretrained(model_dir, dtype=float32, "
            "attn_implementation='eager')(input_ids).last_hidden_state for one unpadded sequence "
            "(no attention_mask), CPU, one thread: the DECODER's output, decoder_input_ids = "
            "shift_tokens_right(input_ids, pad 1, decoder_start_token_id 2) (stored per case as "
            "decoder_input_ids), causal decoder self-attention, cross-attention over the whole "
            "encoder output; encoder_file: encoder_last_hidden_state of the same call (the "
            "encoder's output, bidirectional). Both [tokens, 64] little-endian float32, "
            "row-major, no header")
        del golden["num_layers"]
        golden["tolerance"]["encoder_max_abs"] = kTolerance
    elif spec.kind == "qwen3":
        golden["golden_note"] = (
            "hidden_file: AutoModel.from_pretrained(model_dir, dtype=float32, "
            "attn_implementation='eager')(input_ids).last_hidden_state of Qwen3Model for one "
            "unpadded sequence (no attention_mask, position_ids 0..n-1, use_cache false), CPU, "
            "one thread: the residual stream after the last layer through the final RMSNorm "
            "(norm.weight), causal attention. [tokens, 64] little-endian float32, row-major, no "
            "header. input_ids are AutoTokenizer(model_dir)(text, add_special_tokens=True), "
            "equal to tokenizer.json's encoding: tiny-qwen3's tokenizer unchanged, whose "
            "post-processor prepends <s> (1) and appends nothing (Qwen3-Embedding's own tokenizer "
            "instead adds no BOS and appends <|endoftext|>; kiln must follow tokenizer.json, not "
            "a per-architecture rule)")
    elif spec.kind == "qwen2":
        golden["golden_note"] = (
            "hidden_file: AutoModel.from_pretrained(model_dir, dtype=float32, "
            "attn_implementation='eager')(input_ids).last_hidden_state of Qwen2Model for one "
            "unpadded sequence (no attention_mask, position_ids 0..n-1, use_cache false), CPU, "
            "one thread: the residual stream after the last layer through the final RMSNorm "
            "(norm.weight), causal attention over the whole sequence (sliding_window 8 in the "
            "config is off: use_sliding_window false). [tokens, 64] little-endian float32, "
            "row-major, no header. input_ids are tokenizer.json's encoding "
            "(tokenizers.Tokenizer.from_file(model_dir/tokenizer.json).encode(text).ids, what "
            "kiln reads; AutoTokenizer differs on some cases, see auto_tokenizer_note): "
            "tiny-qwen2's tokenizer unchanged, whose post-processor prepends <s> (1) and appends "
            "nothing (a published checkpoint's tokenizer may instead add no BOS and append "
            "<|endoftext|>, as Qwen3-Embedding's does; kiln must follow tokenizer.json, not a "
            "per-architecture rule)")
        golden["auto_tokenizer_note"] = (
            f"AutoTokenizer.from_pretrained(model_dir) (transformers {transformers.__version__}) "
            f"ignores tokenizer_config's tokenizer_class for model_type qwen2 and builds "
            f"Qwen2Tokenizer: tokenizer.json's vocab, merges and post-processor, but its own NFC "
            f"normalizer and pre-tokenizer regex, which splits digits one at a time, and it adds "
            f"<|endoftext|> as pad token at id {vocab} (past tokenizer.json's vocab and the "
            f"embedding table). Its ids equal tokenizer.json's on case(s) "
            f"{[i for i in range(len(cases)) if i not in autoDiffers]} and differ on "
            f"{autoDiffers} (stored there as auto_tokenizer_input_ids, checked to be exactly "
            f"that rule's encoding); the goldens follow tokenizer.json")
    elif spec.kind == "mistral":
        golden["golden_note"] = (
            "hidden_file: AutoModel.from_pretrained(model_dir, dtype=float32, "
            "attn_implementation='eager')(input_ids).last_hidden_state of MistralModel for one "
            "unpadded sequence (no attention_mask, position_ids 0..n-1, use_cache false), CPU, "
            "one thread: the residual stream after the last layer through the final RMSNorm "
            "(norm.weight), causal attention within sliding_window 6 on every layer (token i "
            "attends to tokens i-5..i). [tokens, 64] little-endian float32, row-major, no "
            "header. input_ids are AutoTokenizer(model_dir)(text, add_special_tokens=True), "
            "equal to tokenizer.json's encoding: tiny-mistral's tokenizer unchanged, which "
            "prepends <s> (1) and appends nothing (e5-mistral's tokenizer appends </s>; kiln "
            "must follow tokenizer.json, not a per-architecture rule)")
    else:
        golden["golden_note"] = (
            f"hidden_file: AutoModel.from_pretrained(model_dir, dtype=float32, "
            f"attn_implementation='eager')("
            f"{'input_ids, token_type_ids' if spec.kind == 'bert' else 'input_ids'})"
            f".last_hidden_state of "
            f"{spec.architecture} for one unpadded sequence (no attention_mask), CPU, one thread: "
            f"the last layer's output LayerNorm (post-LN; the pooler is stored in the weights "
            f"but not applied). [tokens, {hiddenSize}] little-endian float32, row-major, no "
            f"header. input_ids are AutoTokenizer(model_dir)(text[, text_pair], "
            f"add_special_tokens=True), equal to tokenizer.json's encoding")
    if spec.pooling:
        golden["tolerance"]["pooled_max_abs"] = kTolerance
        golden["pooling"] = {
            "mode": spec.pooling, "normalize": True,
            "from": "modules.json (Transformer, Pooling, Normalize) and 1_Pooling/config.json",
            "note": (
                "pooled_unnormalized: sentence-transformers Pooling of the case's hidden rows ("
                + {"mean": "mean over all tokens with attention_mask 1, special tokens "
                           "included: sum(h * mask) / max(sum(mask), 1e-9)",
                   "cls": "the first token's row (<s>): the first position with "
                          "attention_mask 1",
                   "lasttoken": "the last token's row: the last position with attention_mask "
                                "1, here the last text token (the tokenizer appends no EOS); "
                                + ("with left padding, as Qwen3-Embedding pads, the last "
                                   "column" if spec.kind != "qwen2" else
                                   "with left padding (padding_side left), the last column")
                   }[spec.pooling]
                + "); pooled: that vector L2-normalized (Normalize: v / max(|v|_2, 1e-12)). "
                "Computed in numpy (float64, rounded to 8 decimals) following "
                "sentence-transformers' documented semantics"
                + (": the package is not installed in the generating environment. "
                   if spec.kind not in ("qwen2", "mistral") else
                   " (the same bytes whether or not the package is installed). ")
                + {"qwen3": kQwen3StCrossCheck, "qwen2": kQwen2StCrossCheck,
                   "mistral": kMistralStCrossCheck}.get(
                    spec.kind, "Cross-checked once against sentence-transformers 6.2.0's "
                               "SentenceTransformer(model_dir).encode (max |diff| < 1e-6)"))}
    golden["token_type_note"] = (
        "token_type_ids: AutoTokenizer's (BERT: 1 on the pair's second segment and its [SEP]); "
        "zeros where the tokenizer returns none (XLM-R, BART: the model adds token type row 0 "
        "(XLM-R) or has no token types (BART))") if spec.kind not in kDecoderKinds else (
        f"token_type_ids: zeros (the tokenizer returns none; {spec.kind.capitalize()} has no "
        f"token types)")
    golden["reference_check"] = {
        "note": "an independent float64 numpy rendering of the architecture from "
                "model.safetensors alone (make_encoder_goldens.py: referenceForward) vs the golden "
                "rows, all cases",
        "hidden_max_abs": float(f"{refDiff:.3g}")}
    if spec.kind == "bart":
        golden["reference_check"]["encoder_max_abs"] = float(f"{refEncDiff:.3g}")
    golden["batched_check"] = {
        "note": "all cases as one batch, right-padded with pad_token_id and attention_mask 0 "
                "(token_type_ids 0); each case's first `tokens` rows vs its golden",
        "hidden_max_abs": float(f"{batchDiff:.3g}")}
    if spec.kind == "bart":
        golden["batched_check"]["encoder_max_abs"] = float(f"{batchEncDiff:.3g}")
    if spec.kind in kDecoderKinds:
        golden["batched_check"]["note"] = (
            "all cases as one batch, right-padded with </s> (2; the config has no pad id) and "
            "attention_mask 0; each case's first `tokens` rows vs its golden, and last-token "
            "pooling of the padded rows with the mask vs `pooled`")
        golden["left_padded_check"] = {
            "note": ("the same batch left-padded (as Qwen3-Embedding's tokenizer pads: "
                     "padding_side left)" if spec.kind == "qwen3" else
                     "the same batch left-padded (padding_side left, as Qwen3-Embedding's "
                     "tokenizer pads)")
                    + ", attention_mask 0 on the padding, position_ids left to "
                    "transformers (0..width-1 for every row, so a case's tokens sit at positions "
                    "pad..width-1: rope is relative, the rows are unchanged); each case's last "
                    "`tokens` rows vs its golden, and last-column pooling vs `pooled`",
            "hidden_max_abs": float(f"{leftDiff:.3g}")}
    desc = "; ".join(
        f"{k} {v['last_hidden_state']:.3g} (encoder {v['encoder_last_hidden_state']:.3g})"
        if isinstance(v, dict) else f"{k} {v:.3g}" for k, v in effects.items())
    if spec.kind in kDecoderKinds:
        pooledDesc = "; ".join(f"{k} {v:.3g}" for k, v in pooledEffects.items())
        golden["feature_checks"] = (
            f"max |hidden - golden| over all cases when one feature is dropped or swapped (each "
            f"must exceed {kMustExceed:g}, 100x the tolerance; asserted): {desc}. Pooling and "
            f"tokenization swaps, max |pooled - golden pooled| (normalized) over all cases (each "
            f"must exceed {kMustExceed:g}; asserted): {pooledDesc}")
        golden["feature_check_deltas"] = effects
        golden["pooling_check_deltas"] = pooledEffects
        golden["fixture_note"] = (
            f"{spec.notes}. Random weights, seed {spec.seed}, drawn as family_fixtures.py's "
            f"decoders: RMSNorm weights (input_layernorm, post_attention_layernorm, "
            + ("q_norm, k_norm, norm" if spec.kind == "qwen3" else "norm")
            + f") 1 + N(0, {kDecoderNormStd}), every other tensor (embed_tokens "
            + ("included" if spec.kind == "qwen3" else "and the q/k/v biases included")
            + f") N(0, {kDecoderWeightStd})")
    else:
        golden["feature_checks"] = (
            f"max |hidden - golden| over all cases when one feature is dropped or swapped (each "
            f"must exceed {kMustExceed:g}, 100x the tolerance, except the numeric "
            f"gelu-approximation and layer_norm_eps swaps, {kMustExceedNumeric:g}; asserted): "
            f"{desc}")
        golden["feature_check_deltas"] = effects
        golden["fixture_note"] = (
            f"{spec.notes}. Random weights, seed {spec.seed}: matrices N(0, {kWeightStd}), "
            f"LayerNorm weights 1 + N(0, {kNormStd}), biases N(0, {kBiasStd}), embedding tables "
            f"N(0, {kEmbedStd})")
    for c in cases:
        del c["n"]
    golden["cases"] = cases
    writeGoldenJson(os.path.join(goldenDir, f"{spec.name}.embed.json"), golden)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default=os.getcwd(), help="kiln repo root (default: cwd)")
    parser.add_argument("--only", nargs="*", help="fixture names (default: all)")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # fixed reduction order: same bytes on every rerun
    goldenDir = os.path.join(args.repo, "tests/data/golden")
    os.makedirs(goldenDir, exist_ok=True)
    known = [spec.name for spec in kFixtures]
    if args.only:
        unknown = sorted(set(args.only) - set(known))
        if unknown:
            raise SystemExit(f"unknown fixture(s) {unknown}; known: {known}")
    for spec in kFixtures:
        if args.only and spec.name not in args.only:
            continue
        goldenForFixture(spec, args.repo, goldenDir)
    print(f"versions: {json.dumps(versions())}")


if __name__ == "__main__":
    main()
