"""The official openai Python client against `kiln serve`: completions and chat, streaming and
not, n, stop, seed, logprobs; greedy outputs equal `kiln generate` for the same request."""
import unittest

import openai

import serve_harness as h

PROMPT = "Once upon a time"


class OpenAiClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.artifact = h.tiny_artifact()
        cls.server = h.Server(cls.artifact, "--chat-template", h.CHAT_TEMPLATE).__enter__()
        cls.client = openai.OpenAI(base_url=cls.server.url + "/v1", api_key="unused",
                                   max_retries=0, timeout=60)
        cls.model = cls.client.models.list().data[0].id

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        cls.server.__exit__(None, None, None)
        assert code == 0, f"kiln serve exited {code}"

    def test_models(self):
        models = self.client.models.list().data
        self.assertEqual([m.id for m in models], ["tiny-llama"])

    def test_models_retrieve(self):
        model = self.client.models.retrieve("tiny-llama")
        self.assertEqual(model.id, "tiny-llama")
        self.assertEqual(model.object, "model")
        self.assertEqual(model.owned_by, "kiln")
        with self.assertRaises(openai.NotFoundError) as caught:
            self.client.models.retrieve("gpt-4")
        self.assertEqual(caught.exception.status_code, 404)
        self.assertEqual(caught.exception.body["code"], "model_not_found")
        self.assertEqual(caught.exception.body["message"],
                         "the model 'gpt-4' does not exist; this server serves 'tiny-llama'")

    def test_greedy_completion_equals_kiln_generate(self):
        expected = h.kiln_generate(self.artifact, PROMPT, 12)
        r = self.client.completions.create(model=self.model, prompt=PROMPT, max_tokens=12,
                                           temperature=0, extra_body={"return_token_ids": True})
        self.assertEqual(r.prompt_token_ids, expected["prompt_ids"])
        self.assertEqual(r.choices[0].token_ids, expected["output_ids"])
        self.assertEqual(r.choices[0].text, expected["text"])
        self.assertEqual(r.choices[0].finish_reason, expected["finish_reason"])
        self.assertEqual(r.usage.prompt_tokens, len(expected["prompt_ids"]))
        self.assertEqual(r.usage.completion_tokens, len(expected["output_ids"]))

    def test_streamed_completion_equals_whole(self):
        whole = self.client.completions.create(model=self.model, prompt=PROMPT, max_tokens=10,
                                               temperature=0)
        chunks = list(self.client.completions.create(
            model=self.model, prompt=PROMPT, max_tokens=10, temperature=0, stream=True,
            stream_options={"include_usage": True}))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        self.assertEqual(text, whole.choices[0].text)
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
        self.assertEqual(finishes[-1], whole.choices[0].finish_reason)
        self.assertTrue(all(f is None for f in finishes[:-1]))
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, whole.usage.completion_tokens)

    def test_n_and_seed(self):
        kw = dict(model=self.model, prompt=PROMPT, max_tokens=8, temperature=1.0, n=3,
                  extra_body={"ignore_eos": True})
        a = self.client.completions.create(seed=1234, **kw)
        b = self.client.completions.create(seed=1234, **kw)
        self.assertEqual(len(a.choices), 3)
        self.assertEqual(sorted(c.index for c in a.choices), [0, 1, 2])
        self.assertEqual([c.text for c in a.choices], [c.text for c in b.choices])
        self.assertEqual(a.usage.completion_tokens, 3 * 8)
        other = self.client.completions.create(seed=99, **kw)
        self.assertNotEqual([c.text for c in a.choices], [c.text for c in other.choices])

    def test_stop_string(self):
        whole = self.client.completions.create(model=self.model, prompt=PROMPT, max_tokens=24,
                                               temperature=0, extra_body={"ignore_eos": True})
        text = whole.choices[0].text
        self.assertGreater(len(text), 6)
        stop = text[4:6]
        cut = text.index(stop)
        r = self.client.completions.create(model=self.model, prompt=PROMPT, max_tokens=24,
                                           temperature=0, stop=[stop],
                                           extra_body={"ignore_eos": True})
        self.assertEqual(r.choices[0].text, text[:cut])
        self.assertEqual(r.choices[0].finish_reason, "stop")

    def test_completion_logprobs(self):
        r = self.client.completions.create(model=self.model, prompt=PROMPT, max_tokens=5,
                                           temperature=0, logprobs=3)
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), 5)
        self.assertEqual(len(lp.token_logprobs), 5)
        for top, sampled in zip(lp.top_logprobs, lp.token_logprobs):
            # A dict by token text: alternatives that decode alike (partial UTF-8) share a key.
            self.assertIn(len(top), (1, 2, 3))
            self.assertLessEqual(sampled, 0.0)
            # Greedy: the sampled token is the most likely one.
            self.assertAlmostEqual(sampled, max(top.values()), places=5)

    def test_chat_whole_and_streamed(self):
        messages = [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Tell me a story."}]
        whole = self.client.chat.completions.create(model=self.model, messages=messages,
                                                    max_tokens=10, temperature=0)
        self.assertEqual(whole.choices[0].message.role, "assistant")
        stream = list(self.client.chat.completions.create(
            model=self.model, messages=messages, max_tokens=10, temperature=0, stream=True))
        self.assertEqual(stream[0].choices[0].delta.role, "assistant")
        text = "".join(c.choices[0].delta.content or "" for c in stream)
        self.assertEqual(text, whole.choices[0].message.content)
        self.assertEqual(stream[-1].choices[0].finish_reason, whole.choices[0].finish_reason)

    def test_chat_logprobs_and_n(self):
        r = self.client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
            temperature=0.8, seed=7, n=2, logprobs=True, top_logprobs=2)
        self.assertEqual(len(r.choices), 2)
        for choice in r.choices:
            content = choice.logprobs.content
            self.assertGreaterEqual(len(content), 1)
            for entry in content:
                self.assertEqual(len(entry.top_logprobs), 2)
                self.assertEqual(bytes(entry.bytes).decode(errors="replace"), entry.token)

    def test_errors_surface_as_openai_exceptions(self):
        with self.assertRaises(openai.BadRequestError) as ctx:
            self.client.completions.create(model=self.model, prompt=PROMPT, max_tokens=10,
                                           temperature=5)
        self.assertEqual(ctx.exception.body["param"], "temperature")
        with self.assertRaises(openai.NotFoundError):
            self.client.completions.create(model="gpt-4", prompt=PROMPT, max_tokens=1)


if __name__ == "__main__":
    h.run_tests()
