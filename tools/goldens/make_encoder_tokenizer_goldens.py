#!/usr/bin/env python3
"""Encoder tokenizer goldens for tests/runtime/text: tests/data/tokenizer/encoders/.

The shared assets hold no BERT / XLM-R tokenizers, so this script trains small ones with HF
`tokenizers` (and `sentencepiece` for the XLM-R one) on the text below and writes, for each,
    encoders/<name>/tokenizer.json
    encoders/<name>/goldens.json   (same case format as make_tokenizer_goldens.py writes)
The cases are tests/data/tokenizer/corpus.txt plus EXTRA_CASES below (accents, CJK, punctuation,
specials written in text, unknown characters, words longer than max_input_chars_per_word).
For each case, from tokenizers.Tokenizer (transformers is only used to convert the sentencepiece
model the way XLM-R's tokenizer.json was made):
  ids / ids_special    encode(text, add_special_tokens=False / True).ids
  decode_plain         decode(ids, skip_special_tokens=False)
  decode_special       decode(ids_special, skip_special_tokens=False)
  decode_skip          decode(ids_special, skip_special_tokens=True)
  ids_special_right_N / ids_special_left_N
                       encode(text, add_special_tokens=True).ids with enable_truncation(
                       max_length=N, direction="right" / "left"), N in TRUNCATE_TO

It also writes encoders/unicode_sweep.json: for every code point, what HF's BertNormalizer,
BertPreTokenizer and the xlmr Precompiled normalizer do with it (HF takes its character classes
from old Unicode tables, so ICU's current ones need corrections; the sweep checks them all).

Versions: kiln matches tokenizers 0.22.x (see make_tokenizer_goldens.py); the environment that
script describes plus sentencepiece:
    /tmp/kiln-tok-goldens/bin/pip install transformers==4.57.1 sentencepiece protobuf
    /tmp/kiln-tok-goldens/bin/python tools/goldens/make_encoder_tokenizer_goldens.py
Training is not reproducible (the trainers break ties in hash-map order), so the committed
tokenizer.json files are the fixtures: a run reads them and rewrites only the goldens (the same
bytes on every run); --retrain trains new tokenizers, after which every golden changes.
"""
import argparse
import base64
import json
import os
import sys
import tempfile
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
OUT_DIR = os.path.join(REPO, "tests", "data", "tokenizer", "encoders")
sys.path.insert(0, HERE)
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from make_tokenizer_goldens import read_corpus  # noqa: E402  (the shared corpus reader)

TRAIN_TEXT = """\
The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with one step.
Natural language processing lets computers read, understand and generate human language.
Encoders such as BERT turn every sentence into vectors; retrieval systems compare those vectors.
She said: "I'm not sure it's working," but they'd already shipped it. Don't panic!
In 2024, the model scored 91.5% on the benchmark (up from 87.2%), costing $3,000 per run.
Email me at someone@example.com or visit https://example.com/path?query=1&lang=en.
def tokenize(text): return [word.lower() for word in text.split()]  # simple baseline
Le café est délicieux; l'élève a étudié à l'école où il a reçu un prix. Ça va très bien.
Über den Wolken muss die Freiheit wohl grenzenlos sein. Größe, Straße, schön, Mädchen.
El niño comió una manzana. ¿Dónde está la biblioteca? ¡Qué día tan bonito! Señor Muñoz.
São Paulo é uma cidade enorme. A ação começou às três horas. Coração, informação, pão.
Привет, как дела? Москва — столица России. Это очень интересная книга.
我们今天去公园散步。中文分词是一个有趣的问题。北京是中国的首都，上海是一个大城市。
机器学习和深度学习正在改变世界。语言模型可以理解和生成文本。我爱你，中国！
東京は日本の首都です。ひらがなとカタカナを勉強しています。ありがとうございます。
서울은 한국의 수도입니다. 감사합니다. 안녕하세요!
Γειά σου κόσμε. Η Αθήνα είναι η πρωτεύουσα της Ελλάδας.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 3.14159 2.71828 1,000,000 42nd 1st 2nd 3rd
Punctuation everywhere!!! Really??? Yes... (maybe) [sometimes] {rarely} <never> -- ok; fine: done.
Mixed CASE Words Like iPhone, eBay, McDonald, NASA, UNESCO and JavaScript or TypeScript.
Embeddings compare queries with documents: similarity, ranking, clustering, classification.
The résumé of the naïve café owner mentioned a façade, a crème brûlée and a jalapeño.
Transformers use attention; attention uses queries, keys and values; values carry information.
Once upon a time, there was a little girl named Lily. She loved to play outside in the sun.
Tokenizers split text into words, words into subwords, and subwords into characters if needed.
"""

EXTRA_CASES = [
    "", " ", "   ", "\t\n", "\u3000", "a", "A", "Hello World!", "HELLO WORLD", "hello world",
    "Héllo Wörld", "Ångström ÅNGSTRÖM", "ÉCOLE école Élève", "naïve coöperate", "Crème Brûlée",
    "straße STRASSE", "İstanbul ıi Iİ", "ΟΔΟΣ Σίσυφος ΣΑΣ ς", "ǅ ǈ ǋ titlecase",
    "ﬀ ﬃ ﬁ ligatures", "ＡＢＣ１２３！？ fullwidth", "ｶﾀｶﾅ halfwidth", "①②③ ⑴ ㈠", "x² H₂O ½",
    "㎏ ㍿ ℃ ™ №", "你好，世界！", "BERT是一个模型。", "中文English混合123测试",
    "𠀀𠀁𪜀 extension ideographs", "丽 豈 compatibility ideographs", "ひらがな カタカナ 漢字",
    "Hello,world.How's it-going?", "a...b", "(parens) [brackets] {braces} <angles>",
    "«quotes» „German“ ‘single’ “double”", "dash—em–en‐hyphen", "¿Qué? ¡Sí!",
    "x = y + z * 2 / 3 ^ 4 | 5 & 6 ~ 7 < 8 > 9 $10 `tick` @at #hash %pct",
    "canadian ᙭ chi sign and sharada 𑇉 sandhi", "§ ¶ † ‡ • ‰ ′ ″ ※ ‼ ⁇ ⁂",
    "〈〉《》「」『』【】〔〕", "Ελληνικά ⅷ ᚠᚢᚦ runes ⴰⵣⵓⵍ tifinagh",
    "supercalifragilisticexpialidocious", "pneumonoultramicroscopicsilicovolcanoconiosis",
    "x" * 150, "ab" * 60 + " short", "é" * 101, "[CLS] hello [SEP] world [MASK] [UNK] [PAD]",
    "[cls] lowercase [sep] not special", "<s> hi </s> <mask> x <unk> <pad>", "hello<mask>world",
    "hello <mask> world", "  <mask>", "[MASK]ed [SEP][SEP]", "a\u00a0b", "a\u3000b", "tab\there",
    "\r\n\r\n", "zero\u200bwidth\u200djoiner", "\u0000null\u0000", "\ufffdrepl", "e\u0301",
    "A\u0300\u0301", "ñ N\u0303", "Việt Nam", "Đ đ Ł ł Ø ø", "1234567890 3.14159 1,000,000",
    "0xDEADBEEF 1e-9", "a  b   c    d", "  leading", "trailing  ", "क्षत्रिय ज्ञान",
    "a\u0308\u0301 o\u0302\u0323", "ＡＢ\u0301", "ﬁ\u0301", "K\u0301 k\u0301", "\u212b \u2126",
    "☃ snowman 🦙 llama ᚠ rune", "emoji👍🏽end 🇺🇸flag",
    "The embedding of this sentence is a vector.", "don't won't can't I'll we've they're",
    "Mr. Smith paid $4.50 for 3 apples, didn't he?", "end.", ".start", "?!", "'", "' '",
    "do not", "I do not know", "il y a l'été", "ABC def GHI", "MiXeD CaSe",
]

SPECIAL_BERT = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def random_cases(count, seed=2026):
    """Seeded random strings mixing the pieces encoders trip on (a differential fuzz, kept)."""
    import random

    rng = random.Random(seed)
    pools = [
        lambda: rng.choice(["hello", "The", "café", "naïve", "straße", "ΟΔΟΣ", "İ", "don't",
                            "I'm", "do not", "n't", "'s", "1,000", "3.14"]),
        lambda: chr(rng.randint(0x20, 0x7E)), lambda: chr(rng.randint(0xA0, 0x24F)),
        lambda: chr(rng.randint(0x300, 0x36F)), lambda: chr(rng.randint(0x4E00, 0x4E80)),
        lambda: chr(rng.randint(0x3040, 0x30FF)), lambda: chr(rng.randint(0xAC00, 0xAC40)),
        lambda: chr(rng.randint(0x1F300, 0x1F6FF)), lambda: chr(rng.randint(0x2000, 0x206F)),
        lambda: chr(rng.randint(0xFF01, 0xFFEE)), lambda: chr(rng.randint(0x1D400, 0x1D4FF)),
        lambda: chr(rng.randint(0x900, 0x97F)), lambda: chr(rng.randint(0x10000, 0x10FFFF)),
        lambda: chr(rng.choice([0, 1, 9, 10, 13, 0x7F, 0x85, 0xA0, 0xAD, 0x200B, 0x200D, 0xFEFF,
                                0xFFFD, 0x3000, 0xE000, 0x166D, 0x111C9, 0x1734, 0xFE0F])),
        lambda: rng.choice(["[CLS]", "[SEP]", "[MASK]", "[UNK]", "<s>", "</s>", "<mask>",
                            "<unk>", " <mask>", "<pad>", "▁", "##"]),
        lambda: " " * rng.randint(1, 4),
        lambda: rng.choice(["e\u0301", "a\u0308\u0301", "\r\n", "A\u030a", "K\u0301", "ﬁ"]),
        lambda: "x" * rng.randint(15, 60),
    ]
    cases = []
    for _ in range(count):
        text = "".join(rng.choice(pools)() for _ in range(rng.randint(1, 20)))
        cases.append("".join(c for c in text if not 0xD800 <= ord(c) <= 0xDFFF))
    return cases


def train_lines():
    return [line for line in TRAIN_TEXT.split("\n") if line] * 3


def bert(lowercase, strip_accents, chinese, template, max_chars, vocab_size):
    from tokenizers import processors
    from tokenizers.implementations import BertWordPieceTokenizer

    t = BertWordPieceTokenizer(clean_text=True, handle_chinese_chars=chinese,
                               strip_accents=strip_accents, lowercase=lowercase)
    t.train_from_iterator(train_lines(), vocab_size=vocab_size, min_frequency=1,
                          special_tokens=SPECIAL_BERT, show_progress=False)
    tok = t._tokenizer
    tok.model.max_input_chars_per_word = max_chars
    if template:
        cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tok


def charsmap_rules():
    """A small sentencepiece normalization rule set: NFKC of chosen blocks, a few compositions,
    control characters removed and odd spaces made plain (what nmt_nfkc does, in miniature)."""
    rules = {}
    blocks = [(0x00A0, 0x017F), (0x2000, 0x215F), (0x2460, 0x24FF), (0x3000, 0x303F),
              (0x3200, 0x33FF), (0xFB00, 0xFB06), (0xFF01, 0xFFEE), (0x1D400, 0x1D4FF)]
    for lo, hi in blocks:
        for cp in range(lo, hi + 1):
            c = chr(cp)
            n = unicodedata.normalize("NFKC", c)
            if n != c and unicodedata.category(c) != "Cn":
                rules[(cp,)] = tuple(ord(x) for x in n)
    for base in "AEIOUNaeioun":
        for mark in (0x300, 0x301, 0x302, 0x303, 0x308):
            seq = base + chr(mark)
            n = unicodedata.normalize("NFKC", seq)
            if len(n) == 1:
                rules[tuple(ord(x) for x in seq)] = (ord(n),)
    rules[(ord("a"), 0x308, 0x301)] = (0xE4, 0x301)  # three-char key (grapheme < 6 bytes)
    for cp in list(range(0x01, 0x09)) + [0x0B, 0x0E, 0x0F, 0x7F, 0x200B, 0xFEFF]:
        rules[(cp,)] = ()
    for cp in (0x09, 0x0A, 0x0D, 0x3000):
        rules[(cp,)] = (0x20,)
    rules[(0x0D, 0x0A)] = (0x20,)
    lines = []
    for src, dst in sorted(rules.items()):
        lines.append(" ".join("%X" % c for c in src) + "\t" + " ".join("%X" % c for c in dst))
    return "\n".join(lines) + "\n"


def xlmr(work):
    import sentencepiece as spm
    from transformers import XLMRobertaTokenizer
    from transformers.convert_slow_tokenizer import convert_slow_tokenizer

    tsv = os.path.join(work, "rules.tsv")
    with open(tsv, "w", encoding="utf-8") as f:
        f.write(charsmap_rules())
    prefix = os.path.join(work, "spm")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(train_lines()), model_prefix=prefix, vocab_size=1000,
        model_type="unigram", normalization_rule_tsv=tsv, character_coverage=0.98,
        hard_vocab_limit=False, num_threads=1, seed_sentencepiece_size=100000,
        shuffle_input_sentence=False, minloglevel=2)
    slow = XLMRobertaTokenizer(vocab_file=prefix + ".model")
    return convert_slow_tokenizer(slow)


def unigram_byte_fallback():
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers import processors, trainers, Regex

    base = Tokenizer(models.Unigram())
    base.normalizer = normalizers.Sequence([normalizers.NFKC(),
                                            normalizers.Replace(Regex(" {2,}"), " ")])
    base.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = trainers.UnigramTrainer(vocab_size=700, special_tokens=["<unk>", "<s>", "</s>"],
                                      unk_token="<unk>", show_progress=False)
    base.train_from_iterator(train_lines(), trainer=trainer)
    vocab = json.loads(base.to_str())["model"]["vocab"]
    vocab += [["<0x%02X>" % b, -20.0] for b in range(256)]
    tok = Tokenizer(models.Unigram([tuple(v) for v in vocab], unk_id=0, byte_fallback=True))
    tok.normalizer = base.normalizer
    tok.pre_tokenizer = base.pre_tokenizer
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    return tok


def roberta():
    from tokenizers import AddedToken, processors
    from tokenizers.implementations import ByteLevelBPETokenizer

    t = ByteLevelBPETokenizer(add_prefix_space=False, trim_offsets=True)
    t.train_from_iterator(train_lines(), vocab_size=900, min_frequency=2,
                          special_tokens=["<s>", "<pad>", "</s>", "<unk>"], show_progress=False)
    tok = t._tokenizer
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
    tok.post_processor = processors.RobertaProcessing(
        ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")),
        trim_offsets=True, add_prefix_space=True)
    return tok


# Truncation lengths (TEI's truncate): one special token of room and more.
TRUNCATE_TO = (3, 6)


def truncated(tok, text, length, direction):
    tok.enable_truncation(max_length=length, direction=direction)
    try:
        return tok.encode(text, add_special_tokens=True).ids
    finally:
        tok.no_truncation()


def goldens(tok, name, cases):
    import tokenizers

    entries = []
    for text in cases:
        ids = tok.encode(text, add_special_tokens=False).ids
        ids_special = tok.encode(text, add_special_tokens=True).ids
        entry = {
            "text": text, "ids": ids, "ids_special": ids_special,
            "decode_plain": tok.decode(ids, skip_special_tokens=False),
            "decode_special": tok.decode(ids_special, skip_special_tokens=False),
            "decode_skip": tok.decode(ids_special, skip_special_tokens=True),
        }
        for length in TRUNCATE_TO:
            for direction in ("right", "left"):
                entry[f"ids_special_{direction}_{length}"] = truncated(tok, text, length,
                                                                        direction)
        entries.append(entry)
    return {"family": name, "tokenizers_version": tokenizers.__version__,
            "vocab_size": tok.get_vocab_size(with_added_tokens=True), "cases": entries}


def ranges(cps):
    out = []
    for cp in cps:
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


def unicode_sweep(xlmr_tok):
    """Per code point: BertPreTokenizer isolates it; clean_text removes it or makes it a space;
    strip_accents removes it; lowercase / the xlmr charsmap / NFKC rewrite it (only changes
    kept); NFD changes "a" + it + U+0334 (decomposes it or reorders it past the ccc-1 mark)."""
    from tokenizers import normalizers, pre_tokenizers

    pre = pre_tokenizers.BertPreTokenizer()
    clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False,
                                       strip_accents=False, lowercase=False)
    strip = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False,
                                       strip_accents=True, lowercase=False)
    lower = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False,
                                       strip_accents=False, lowercase=True)
    nfkc, nfd = normalizers.NFKC(), normalizers.NFD()
    charsmap = json.loads(xlmr_tok.to_str())["normalizer"]["normalizers"][0]
    pre_comp = normalizers.Precompiled(base64.b64decode(charsmap["precompiled_charsmap"]))
    punct, removed, spaces, marks, reorders = [], [], [], [], []
    lowered, mapped, compat = {}, {}, {}
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        if len(pre.pre_tokenize_str("a" + c + "a")) == 3:
            punct.append(cp)
        cleaned = clean.normalize_str(c)
        if cleaned == "":
            removed.append(cp)
        elif cleaned == " " and c != " ":
            spaces.append(cp)
        if strip.normalize_str("a" + c) == "a":
            marks.append(cp)
        if (low := lower.normalize_str(c)) != c:
            lowered["%X" % cp] = low
        if (m := pre_comp.normalize_str(c)) != c:
            mapped["%X" % cp] = m
        if (k := nfkc.normalize_str(c)) != c:
            compat["%X" % cp] = k
        if nfd.normalize_str("a" + c + "\u0334") != "a" + c + "\u0334":
            reorders.append(cp)
    return {"bert_punctuation": ranges(punct), "bert_clean_removed": ranges(removed),
            "bert_clean_space": ranges(spaces), "bert_strip_removed": ranges(marks),
            "bert_lowercase": lowered, "xlmr_precompiled": mapped, "nfkc": compat,
            "nfd_changes_a_c_u0334": ranges(reorders)}


def write_json(path, value):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"{os.path.relpath(path, REPO)}: {os.path.getsize(path)} bytes")


TOKENIZERS = {
    "bert-uncased": lambda work: bert(True, None, True, False, 100, 1200),
    "bert-cased": lambda work: bert(False, None, False, True, 20, 1200),
    "bert-strip-accents": lambda work: bert(False, True, True, True, 30, 1000),
    "bert-lower-keep-accents": lambda work: bert(True, False, True, False, 100, 1000),
    "xlmr-unigram": xlmr,
    "unigram-byte-fallback": lambda work: unigram_byte_fallback(),
    "roberta-bpe": lambda work: roberta(),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--retrain", action="store_true", help="train new tokenizer.json files")
    args = ap.parse_args()
    import tokenizers
    from tokenizers import Tokenizer

    if not tokenizers.__version__.startswith("0.22."):
        sys.exit(f"need tokenizers 0.22.x, found {tokenizers.__version__}; see the docstring")
    cases = read_corpus() + EXTRA_CASES + random_cases(40)
    made = {}
    with tempfile.TemporaryDirectory() as work:
        for name, train in TOKENIZERS.items():
            path = os.path.join(OUT_DIR, name, "tokenizer.json")
            if args.retrain or not os.path.exists(path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                train(work).save(path, pretty=False)
                print(f"{os.path.relpath(path, REPO)}: trained, {os.path.getsize(path)} bytes")
            made[name] = Tokenizer.from_file(path)
    for name, tok in made.items():
        write_json(os.path.join(OUT_DIR, name, "goldens.json"), goldens(tok, name, cases))
    sweep = unicode_sweep(made["xlmr-unigram"])
    sweep["tokenizers_version"] = tokenizers.__version__
    write_json(os.path.join(OUT_DIR, "unicode_sweep.json"), sweep)


if __name__ == "__main__":
    main()
