"""Embeddings through `kiln serve` on the random-weight tiny-bert and tiny-xlm-roberta encoders
(tools/goldens/make_encoder_goldens.py): the official openai client's `embeddings.create` (a
string, a list, token ids; float and base64; `dimensions`) returns sentence-transformers' pooled
vectors of transformers' hidden states within 1e-4; TEI's /embed likewise (normalize true and
false; truncate cutting as HF's tokenizer does); SageMaker /invocations of an encoder: raw text/plain gives [1][tokens][hidden], the
last_hidden_state of the HF model, a JSON text pair {"text", "text_pair"} that of HF's pair
encoding (BERT's token types), and OPTION_TASK=text-embedding the pooled vectors; generation
routes and bad inputs answer 400 naming the field; concurrent clients get their own vectors; and
tiny-bart's raw-text /invocations gives BartModel's last_hidden_state (the seed deployment). A
generating model (tiny-llama) embeds through its engine, beside a completion running at the same
time: the normalized last row of transformers' last_hidden_state
(tools/goldens/make_hidden_state_goldens.py) within 1e-4."""
import base64
import concurrent.futures
import json
import os
import struct
import subprocess
import unittest

import numpy as np
import openai

import serve_harness as h

TOL = 1e-4


def golden(name):
    path = os.path.join(h.ARGS.repo, "tests", "data", "golden", name + ".embed.json")
    with open(path) as f:
        g = json.load(f)
    for c in g["cases"]:
        with open(os.path.join(os.path.dirname(path), c["hidden_file"]), "rb") as f:
            raw = f.read()
        c["hidden"] = np.frombuffer(raw, dtype="<f4").reshape(-1, g["hidden_size"])
    return g


def compile_encoder(name):
    out = os.path.join(h.ARGS.work, name + ".kiln")
    if not os.path.isdir(out):
        subprocess.run([h.ARGS.kiln, "compile", os.path.join(h.ARGS.repo, "tests", "data", "models",
                                                             name),
                        "-o", out, "--max-batch", "8", "--max-seq-len", "128", "--quiet"],
                       check=True)
    return out


def unnormalized(case):
    return np.asarray(case["pooled_unnormalized"])


class EmbeddingsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.bert = golden("tiny-bert")
        cls.xlmr = golden("tiny-xlm-roberta")
        cls.bert_artifact = compile_encoder("tiny-bert")
        cls.xlmr_artifact = compile_encoder("tiny-xlm-roberta")

    def single_texts(self, g):
        """The cases of one text (not the sentence pair: the APIs embed single texts)."""
        return [c for c in g["cases"] if "text_pair" not in c]

    def test_openai_client_matches_sentence_transformers(self):
        for g, artifact in ((self.bert, self.bert_artifact), (self.xlmr, self.xlmr_artifact)):
            with h.Server(artifact) as server:
                client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
                cases = self.single_texts(g)
                texts = [c["text"] for c in cases]
                r = client.embeddings.create(model=g["model"], input=texts)
                self.assertEqual([d.index for d in r.data], list(range(len(texts))))
                for c, d in zip(cases, r.data):
                    np.testing.assert_allclose(d.embedding, c["pooled"], atol=TOL, rtol=0)
                self.assertEqual(r.usage.prompt_tokens, sum(len(c["input_ids"]) for c in cases))
                # One string, and token ids: the same vector.
                one = client.embeddings.create(model=g["model"], input=texts[0])
                ids = client.embeddings.create(model=g["model"], input=cases[0]["input_ids"])
                np.testing.assert_allclose(one.data[0].embedding, cases[0]["pooled"], atol=TOL,
                                           rtol=0)
                self.assertEqual(ids.data[0].embedding, one.data[0].embedding)
                # base64 (the client decodes it into floats itself when asked for base64).
                status, _, body = server.post("/v1/embeddings", {
                    "input": texts[0], "encoding_format": "base64"})
                self.assertEqual(status, 200, body)
                raw = base64.b64decode(json.loads(body)["data"][0]["embedding"])
                floats = struct.unpack("<%df" % (len(raw) // 4), raw)
                self.assertEqual(list(floats), one.data[0].embedding)
                # dimensions: the first 16 values, normalized again.
                short = client.embeddings.create(model=g["model"], input=texts[0], dimensions=16)
                cut = unnormalized(cases[0])[:16]
                np.testing.assert_allclose(short.data[0].embedding, cut / np.linalg.norm(cut),
                                           atol=TOL, rtol=0)

    def test_a_generating_model_embeds_through_its_engine_beside_generation(self):
        path = os.path.join(h.ARGS.repo, "tests", "data", "golden", "tiny-llama.hidden.json")
        with open(path) as f:
            g = json.load(f)
        expected = []
        for c in g["cases"]:
            with open(os.path.join(os.path.dirname(path), c["hidden_file"]), "rb") as f:
                last = np.frombuffer(f.read(), dtype="<f4").reshape(c["rows"], -1)[-1]
            expected.append(last / np.linalg.norm(last.astype(np.float64)))
        with h.Server(compile_encoder("tiny-llama")) as server:
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                completion = pool.submit(server.post, "/v1/completions", {
                    "prompt": g["cases"][2]["ids"], "max_tokens": 24, "temperature": 0})
                r = client.embeddings.create(model="tiny-llama",
                                             input=[c["ids"] for c in g["cases"]])
                status, _, body = completion.result()
            self.assertEqual(status, 200, body)
            self.assertEqual(len(json.loads(body)["choices"]), 1)
            for want, d in zip(expected, r.data):
                np.testing.assert_allclose(d.embedding, want, atol=TOL, rtol=0)
            self.assertEqual(r.usage.prompt_tokens, sum(c["rows"] for c in g["cases"]))

    def test_tei_embed_and_sagemaker_feature_extraction(self):
        cases = self.single_texts(self.bert)
        with h.Server(self.bert_artifact) as server:
            status, _, body = server.post("/embed", {"inputs": [c["text"] for c in cases]})
            self.assertEqual(status, 200, body)
            for c, v in zip(cases, json.loads(body)):
                np.testing.assert_allclose(v, c["pooled"], atol=TOL, rtol=0)
            status, _, body = server.post("/embed", {"inputs": cases[1]["text"],
                                                     "normalize": False})
            np.testing.assert_allclose(json.loads(body)[0], unnormalized(cases[1]), atol=TOL,
                                       rtol=0)
            # The seed's client: raw text in, last_hidden_state.tolist() out, [1][tokens][hidden].
            for c in cases:
                status, _, body = server.post("/invocations", c["text"].encode(),
                                              {"Content-Type": "text/plain"})
                self.assertEqual(status, 200, body)
                hidden = np.asarray(json.loads(body))
                self.assertEqual(hidden.shape, (1,) + c["hidden"].shape)
                np.testing.assert_allclose(hidden[0], c["hidden"], atol=TOL, rtol=0)
            status, _, body = server.post("/invocations", {"inputs": [cases[0]["text"]]})
            np.testing.assert_allclose(np.asarray(json.loads(body))[0][0], cases[0]["hidden"],
                                       atol=TOL, rtol=0)
        # OPTION_* apply when started the SageMaker way.
        with h.Server(self.bert_artifact, "--sagemaker",
                      env={"OPTION_TASK": "text-embedding"}) as server:
            status, _, body = server.post("/invocations", cases[0]["text"].encode(),
                                          {"Content-Type": "text/plain"})
            self.assertEqual(status, 200, body)
            np.testing.assert_allclose(json.loads(body), cases[0]["pooled"], atol=TOL, rtol=0)

    def test_bart_feature_extraction_as_the_seed_deployment(self):
        """facebook/bart-large served as DJL's option.task=feature-extraction, in miniature: raw
        text in, BartModel's last_hidden_state out; no pooling, so /v1/embeddings says so."""
        g = golden("tiny-bart")
        artifact = compile_encoder("tiny-bart")
        with h.Server(artifact, "--sagemaker",
                      env={"OPTION_TASK": "feature-extraction"}) as server:
            for c in g["cases"]:
                if "text_pair" in c:
                    continue
                status, _, body = server.post("/invocations", c["text"].encode(),
                                              {"Content-Type": "text/plain"})
                self.assertEqual(status, 200, body)
                hidden = np.asarray(json.loads(body))
                self.assertEqual(hidden.shape, (1,) + c["hidden"].shape)
                np.testing.assert_allclose(hidden[0], c["hidden"], atol=TOL, rtol=0)
            status, _, body = server.post("/v1/embeddings", {"input": "hello"})
            self.assertEqual(status, 400, body)
            self.assertIn("no pooling", json.loads(body)["error"]["message"])

    def test_sagemaker_text_pairs_as_hf_pairs_them(self):
        """{"inputs": {"text": ..., "text_pair": ...}}: the two texts as HF's tokenizer pairs them
        (BERT: [CLS] a [SEP] b [SEP], b's tokens type 1; BART: <s> a </s></s> b </s>, no types);
        the answer is transformers' last_hidden_state for that pair, alone or in a list beside a
        single text; a pair without its second text is refused naming the field."""
        for name, artifact in (("tiny-bert", self.bert_artifact),
                               ("tiny-bart", compile_encoder("tiny-bart"))):
            g = golden(name)
            pair = [c for c in g["cases"] if "text_pair" in c][0]
            single = self.single_texts(g)[0]
            both = {"text": pair["text"], "text_pair": pair["text_pair"]}
            with h.Server(artifact) as server:
                status, _, body = server.post("/invocations", {"inputs": both})
                self.assertEqual(status, 200, body)
                hidden = np.asarray(json.loads(body))
                self.assertEqual(hidden.shape, (1,) + pair["hidden"].shape, name)
                np.testing.assert_allclose(hidden[0], pair["hidden"], atol=TOL, rtol=0)
                status, _, body = server.post("/invocations",
                                              {"inputs": [single["text"], both]})
                self.assertEqual(status, 200, body)
                out = json.loads(body)
                np.testing.assert_allclose(np.asarray(out[0][0]), single["hidden"], atol=TOL,
                                           rtol=0)
                np.testing.assert_allclose(np.asarray(out[1][0]), pair["hidden"], atol=TOL,
                                           rtol=0)
                status, _, reply = server.post("/invocations", {"inputs": [{"text": "a"}]})
                self.assertEqual(status, 400, reply)
                self.assertIn("field 'inputs[0].text_pair' must be a string",
                              json.loads(reply)["error"])

    def test_tei_truncate_cuts_the_text_tokens_as_hf_does(self):
        """TEI's truncate: a text longer than the limit is cut to it, its first tokens kept
        ("Right") or its last ("Left"), [CLS] and [SEP] kept; the vector equals that of the ids
        HF's truncation gives, built here from the golden's HF input_ids (BERT tokenizes words
        alone, so a text repeated with spaces is its ids repeated)."""
        case = self.single_texts(self.bert)[0]
        cls, inner, sep = case["input_ids"][0], case["input_ids"][1:-1], case["input_ids"][-1]
        reps = 200 // len(inner) + 1
        text, words = " ".join([case["text"]] * reps), inner * reps
        with h.Server(self.bert_artifact) as server:
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
            status, _, reply = server.post("/embed", {"inputs": text})
            self.assertEqual(status, 400, reply)
            message = json.loads(reply)["error"]
            self.assertIn("has %d tokens" % (len(words) + 2), message)
            limit = int(message.split("embeds at most ")[1].split()[0])
            self.assertLess(limit, len(words) + 2)
            for direction, kept in (("Right", words[:limit - 2]), ("Left", words[2 - limit:])):
                status, _, body = server.post("/embed", {
                    "inputs": [text, case["text"]], "truncate": True,
                    "truncation_direction": direction})
                self.assertEqual(status, 200, body)
                vectors = json.loads(body)
                want = client.embeddings.create(model=self.bert["model"],
                                                input=[cls] + kept + [sep])
                np.testing.assert_allclose(vectors[0], want.data[0].embedding, atol=1e-6, rtol=0)
                # A text within the limit is not touched.
                np.testing.assert_allclose(vectors[1], case["pooled"], atol=TOL, rtol=0)

    def test_errors_name_the_field(self):
        with h.Server(self.bert_artifact) as server:
            for path, body, field in (
                    ("/v1/embeddings", {}, "input"),
                    ("/v1/embeddings", {"input": ""}, "input"),
                    ("/v1/embeddings", {"input": ["a", 3]}, "input[1]"),
                    ("/v1/embeddings", {"input": "a", "encoding_format": "int8"},
                     "encoding_format"),
                    ("/v1/embeddings", {"input": "a", "dimensions": 65}, "dimensions"),
                    ("/v1/embeddings", {"input": "word " * 200}, "input"),
                    ("/v1/completions", {"prompt": "hi"}, None)):
                status, _, reply = server.post(path, body)
                self.assertEqual(status, 400, (path, body, reply))
                error = json.loads(reply)["error"]
                self.assertEqual(error["param"], field, error)
            for body, field in (({"inputs": "a", "truncate": "yes"}, "truncate"),
                                ({"inputs": "a", "truncation_direction": "Up"},
                                 "truncation_direction")):
                status, _, reply = server.post("/embed", body)
                self.assertEqual(status, 400, reply)
                self.assertIn(field, json.loads(reply)["error"])
            status, _, reply = server.post("/v1/embeddings", {"input": [[5, 99999]]})
            self.assertEqual(status, 400, reply)
            self.assertIn("vocabulary", json.loads(reply)["error"]["message"])
        # option.task must fit the artifact.
        proc = subprocess.run([h.ARGS.kiln, "serve", self.bert_artifact, "--sagemaker",
                               "--port", "0"],
                              env=dict(os.environ, OPTION_TASK="text-generation"),
                              capture_output=True, text=True, timeout=120)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("is an embedding model", proc.stderr)

    def test_concurrent_requests_each_get_their_own_vectors(self):
        cases = self.single_texts(self.xlmr)
        with h.Server(self.xlmr_artifact) as server:
            def one(i):
                c = cases[i % len(cases)]
                status, _, body = server.post("/v1/embeddings", {"input": [c["text"]] * (1 + i % 3)})
                return c, status, body
            with concurrent.futures.ThreadPoolExecutor(16) as pool:
                for c, status, body in pool.map(one, range(64)):
                    self.assertEqual(status, 200, body)
                    for d in json.loads(body)["data"]:
                        np.testing.assert_allclose(d["embedding"], c["pooled"], atol=TOL, rtol=0)


if __name__ == "__main__":
    h.run_tests()
