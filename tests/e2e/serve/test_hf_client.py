"""The official Hugging Face client (huggingface_hub.InferenceClient with base_url) against
`kiln serve`: text_generation plain, with details and streamed (POST /, as against TGI),
get_endpoint_info (GET /info), and TGI's stop-sequence and stop-token texts: the stop sequence
stays in generated_text, and the stream's token texts join to the non-streamed text."""
import json
import os
import sys
import unittest

try:
    import huggingface_hub
    from huggingface_hub import InferenceClient
    from huggingface_hub.errors import ValidationError
except ImportError:
    # run_python_test.sh checks only openai and requests; CI must have this one too.
    message = f"{sys.executable} cannot import huggingface_hub; run scripts/python-test-deps.sh"
    if os.environ.get("CI") == "true":
        sys.exit("FAIL: " + message)
    print("skip: " + message)
    sys.exit(77)

import serve_harness as h

PROMPT = "Once upon a time"


class HfClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.artifact = h.tiny_artifact()
        cls.server = h.Server(cls.artifact).__enter__()
        cls.client = InferenceClient(base_url=cls.server.url, timeout=60)

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        cls.server.__exit__(None, None, None)
        assert code == 0, f"kiln serve exited {code}"

    def generate(self, max_new_tokens, **params):
        """TGI's /generate answer for the same greedy request."""
        status, _, body = self.server.post("/generate", {
            "inputs": PROMPT, "parameters": {"max_new_tokens": max_new_tokens, **params}})
        self.assertEqual(status, 200, body)
        return json.loads(body)

    def whole(self, max_new_tokens, **kwargs):
        return self.client.text_generation(PROMPT, max_new_tokens=max_new_tokens, details=True,
                                           return_full_text=False, **kwargs)

    def test_plain_text_generation(self):
        expected = self.generate(12)["generated_text"]
        # TGI's POST / returns the prompt too unless return_full_text is false.
        self.assertEqual(self.client.text_generation(PROMPT, max_new_tokens=12),
                         PROMPT + expected)
        self.assertEqual(self.client.text_generation(PROMPT, max_new_tokens=12,
                                                     return_full_text=False), expected)
        self.assertEqual(h.kiln_generate(self.artifact, PROMPT, 12)["text"], expected)

    def test_details(self):
        out = self.whole(8)
        details = out.details
        self.assertIn(details.finish_reason, ("length", "eos_token"))
        self.assertEqual(details.generated_tokens, len(details.tokens))
        if details.finish_reason == "length":
            self.assertEqual(details.generated_tokens, 8)
        else:
            self.assertTrue(details.tokens[-1].special)
        self.assertEqual("".join(t.text for t in details.tokens if not t.special),
                         out.generated_text)
        self.assertEqual(out.generated_text, self.generate(8)["generated_text"])
        reference = self.generate(8, details=True)["details"]["tokens"]
        self.assertEqual([t.id for t in details.tokens], [t["id"] for t in reference])
        self.assertEqual([t.text for t in details.tokens], [t["text"] for t in reference])

    def test_stream_equals_whole(self):
        whole = self.whole(16)
        texts = list(self.client.text_generation(PROMPT, max_new_tokens=16, stream=True))
        # TGI streams the eos token with its text ("</s>") when it ends the sample.
        last = whole.details.tokens[-1]
        eos_text = last.text if whole.details.finish_reason == "eos_token" else ""
        self.assertEqual("".join(texts), whole.generated_text + eos_text)
        self.assertEqual(len(texts), whole.details.generated_tokens)

        events = list(self.client.text_generation(PROMPT, max_new_tokens=16, stream=True,
                                                  details=True, return_full_text=False))
        self.assertEqual([e.token.id for e in events], [t.id for t in whole.details.tokens])
        self.assertEqual([e.token.text for e in events], [t.text for t in whole.details.tokens])
        self.assertEqual([e.token.special for e in events],
                         [t.special for t in whole.details.tokens])
        self.assertTrue(all(e.generated_text is None for e in events[:-1]))
        self.assertEqual(events[-1].generated_text, whole.generated_text)
        self.assertEqual(events[-1].details.finish_reason, whole.details.finish_reason)
        self.assertEqual(events[-1].details.generated_tokens, whole.details.generated_tokens)

    def test_stop_token_text_is_the_same_in_stream_and_details(self):
        # The fixture reaches its eos within 200 tokens from "a" (as test_curl_formats.py relies).
        whole = self.client.text_generation("a", max_new_tokens=200, details=True,
                                            return_full_text=False)
        self.assertEqual(whole.details.finish_reason, "eos_token")
        events = list(self.client.text_generation("a", max_new_tokens=200, stream=True,
                                                  details=True, return_full_text=False))
        self.assertEqual([(e.token.id, e.token.text, e.token.special) for e in events],
                         [(t.id, t.text, t.special) for t in whole.details.tokens])
        self.assertNotEqual(events[-1].token.text, "")
        self.assertEqual(events[-1].generated_text, whole.generated_text)

    def test_stop_sequence_stays_in_the_text(self):
        text = self.whole(24).generated_text
        if len(text) < 8:
            self.skipTest(f"the fixture's greedy text is too short to pick a stop from: {text!r}")
        stop = text[4:6]
        cut = text.index(stop)
        out = self.whole(24, stop=[stop])
        self.assertEqual(out.details.finish_reason, "stop_sequence")
        # TGI keeps the stop sequence (and the rest of the token that completed it).
        self.assertTrue(out.generated_text.startswith(text[:cut] + stop), out.generated_text)
        self.assertTrue(text.startswith(out.generated_text), out.generated_text)
        self.assertEqual("".join(t.text for t in out.details.tokens), out.generated_text)

        plain = self.client.text_generation(PROMPT, max_new_tokens=24, stop=[stop],
                                            return_full_text=False)
        self.assertEqual(plain, out.generated_text)
        streamed = list(self.client.text_generation(PROMPT, max_new_tokens=24, stop=[stop],
                                                    stream=True))
        self.assertEqual("".join(streamed), out.generated_text)
        events = list(self.client.text_generation(PROMPT, max_new_tokens=24, stop=[stop],
                                                  stream=True, details=True,
                                                  return_full_text=False))
        self.assertEqual(events[-1].generated_text, out.generated_text)
        self.assertEqual(events[-1].details.finish_reason, "stop_sequence")

    def test_endpoint_info_and_health(self):
        try:
            # Newer clients read /info only for the hf-inference provider (a URL's own endpoint).
            client = InferenceClient(base_url=self.server.url, provider="hf-inference",
                                     timeout=60)
        except TypeError:  # a client from before providers
            client = self.client
        info = client.get_endpoint_info()
        self.assertEqual(info["model_id"], "tiny-llama")
        self.assertEqual(info["max_total_tokens"], 256)
        self.assertEqual(info["max_input_tokens"], 255)
        self.assertEqual(info["max_best_of"], 1)
        self.assertTrue(client.health_check())

    def test_validation_error(self):
        with self.assertRaises(ValidationError):
            self.client.text_generation(PROMPT, max_new_tokens=0)


if __name__ == "__main__":
    print("huggingface_hub", huggingface_hub.__version__)
    h.run_tests()
