"""Several prompts in one /v1/completions request through the official openai client: choice
prompt * n + j equals choice j of the same request for that prompt alone (greedy, seeded, with
stop strings and echo), indices in order, usage the sum; the stream interleaves choices by index,
reassembles to the same texts and ends with one [DONE]; bad batches fail with exact messages."""
import json
import os
import re
import unittest

import openai

import serve_harness as h

PROMPTS = ["Once upon a time", "The little dog", "She said"]


def stop_string(text):
    """Two characters from `text` past its start that a stop string can match (no U+FFFD: that
    stands for bytes that are not UTF-8, which the server matches as they are)."""
    for i in range(2, len(text) - 1):
        window = text[i:i + 2]
        if "\ufffd" not in window and window.strip():
            return window
    raise AssertionError(f"no stop string candidate in {text!r}")


class PromptBatchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.artifact = h.tiny_artifact()
        # --max-waiting 2: the admission limit is 16 + 2 = 18 (the fixture's --max-batch is 16).
        cls.server = h.Server(cls.artifact, "--max-waiting", "2").__enter__()
        cls.client = openai.OpenAI(base_url=cls.server.url + "/v1", api_key="unused",
                                   max_retries=0, timeout=60)
        cls.model = cls.client.models.list().data[0].id
        with open(os.path.join(cls.artifact, "config.json")) as f:
            cls.vocab = json.load(f)["vocab_size"]

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        cls.server.__exit__(None, None, None)
        assert code == 0, f"kiln serve exited {code}"

    def create(self, prompt, **kw):
        return self.client.completions.create(model=self.model, prompt=prompt, **kw)

    def expect_batch_equals_singles(self, n, **kw):
        batch = self.create(PROMPTS, n=n, **kw)
        self.assertEqual([c.index for c in batch.choices], list(range(len(PROMPTS) * n)))
        prompt_tokens = completion_tokens = 0
        for p, prompt in enumerate(PROMPTS):
            single = self.create(prompt, n=n, **kw)
            prompt_tokens += single.usage.prompt_tokens
            completion_tokens += single.usage.completion_tokens
            for j in range(n):
                got, want = batch.choices[p * n + j], single.choices[j]
                self.assertEqual(got.text, want.text, f"prompt {p} choice {j}")
                self.assertEqual(got.finish_reason, want.finish_reason)
        self.assertEqual(batch.usage.prompt_tokens, prompt_tokens)
        self.assertEqual(batch.usage.completion_tokens, completion_tokens)
        self.assertEqual(batch.usage.total_tokens, prompt_tokens + completion_tokens)
        return batch

    def test_three_prompts_two_choices_greedy(self):
        batch = self.expect_batch_equals_singles(2, max_tokens=12, temperature=0)
        self.assertEqual(len(batch.choices), 6)

    def test_seed_stop_and_echo_apply_per_choice(self):
        self.expect_batch_equals_singles(3, max_tokens=10, temperature=1.0, seed=77,
                                         extra_body={"ignore_eos": True})
        whole = self.create(PROMPTS, max_tokens=20, temperature=0,
                            extra_body={"ignore_eos": True})
        stop = stop_string(whole.choices[1].text)  # cuts choice 1; others only where it occurs
        stopped = self.expect_batch_equals_singles(1, max_tokens=20, temperature=0, stop=[stop],
                                                   extra_body={"ignore_eos": True})
        self.assertEqual(stopped.choices[1].finish_reason, "stop")
        echoed = self.expect_batch_equals_singles(1, max_tokens=4, temperature=0, echo=True)
        for p, prompt in enumerate(PROMPTS):
            self.assertTrue(echoed.choices[p].text.startswith(prompt))

    def test_token_id_prompts(self):
        ids = [h.kiln_generate(self.artifact, p, 1)["prompt_ids"] for p in PROMPTS[:2]]
        by_ids = self.create(ids, max_tokens=6, temperature=0)
        by_text = self.create(PROMPTS[:2], max_tokens=6, temperature=0)
        self.assertEqual([c.text for c in by_ids.choices], [c.text for c in by_text.choices])
        self.assertEqual(by_ids.usage.prompt_tokens, sum(len(i) for i in ids))

    def test_stream_interleaves_and_reassembles(self):
        kw = dict(max_tokens=12, temperature=0, n=2)
        whole = self.create(PROMPTS, **kw)
        texts, finish = {}, {}
        chunks = list(self.create(PROMPTS, stream=True, stream_options={"include_usage": True},
                                  **kw))
        for chunk in chunks[:-1]:
            self.assertEqual(len(chunk.choices), 1)
            c = chunk.choices[0]
            self.assertNotIn(c.index, finish, "a choice went on after finishing")
            texts[c.index] = texts.get(c.index, "") + c.text
            if c.finish_reason:
                finish[c.index] = c.finish_reason
        self.assertEqual(sorted(texts), list(range(6)))
        for k in range(6):
            self.assertEqual(texts[k], whole.choices[k].text, f"choice {k}")
            self.assertEqual(finish[k], whole.choices[k].finish_reason)
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.prompt_tokens, whole.usage.prompt_tokens)
        self.assertEqual(chunks[-1].usage.completion_tokens, whole.usage.completion_tokens)
        # On the wire: SSE events, exactly one [DONE], last.
        status, _, body = self.server.post("/v1/completions", {
            "prompt": PROMPTS, "n": 2, "max_tokens": 5, "temperature": 0, "stream": True})
        self.assertEqual(status, 200)
        indices = {c["choices"][0]["index"] for c in h.openai_sse(body)}
        self.assertEqual(indices, set(range(6)))

    def expect_error(self, prompt, param, message, **kw):
        with self.assertRaises(openai.BadRequestError) as ctx:
            self.create(prompt, max_tokens=4, **kw)
        self.assertEqual(ctx.exception.body["param"], param)
        self.assertEqual(ctx.exception.body["message"], message)

    def test_bad_batches_fail_whole_with_exact_messages(self):
        before = self.server.metrics()["kiln:prompt_tokens_total"]
        self.expect_error([], "prompt", "field 'prompt' is an empty array; send a string, an "
                          "array of token ids, or a non-empty array of either")
        self.expect_error(["a", [1, 2]], "prompt", "field 'prompt' mixes kinds of prompts: "
                          "prompt[0] is a string but prompt[1] is an array; send only strings "
                          "or only arrays of token ids")
        self.expect_error(["a"] * 257, "prompt",
                          "field 'prompt' holds 257 prompts; at most 256 are allowed in one "
                          "request")
        self.expect_error(["a", ""], "prompt[1]", "field 'prompt[1]' is empty")
        self.expect_error([[1, 2], [3], [4, self.vocab]], "prompt[2]",
                          f"field 'prompt[2]' holds token id {self.vocab}, outside the "
                          f"vocabulary [0, {self.vocab})")
        long = "word " * 400
        with self.assertRaises(openai.BadRequestError) as ctx:
            self.create(long, max_tokens=4)
        tokens = re.search(r"the prompt has (\d+) tokens", ctx.exception.body["message"])[1]
        self.expect_error(["Hello", long], "prompt[1]",
                          f"prompt[1] has {tokens} tokens; the model's maximum sequence length "
                          f"is 256 (room for the prompt plus at least one generated token)")
        self.expect_error(["a"] * 19, "prompt",
                          "field 'prompt' holds 19 prompts but the server admits at most 18 "
                          "requests at once (--max-batch plus --max-waiting); send at most 18 "
                          "prompts per request")
        # Nothing of any failed batch reached the engine.
        self.assertEqual(self.server.metrics()["kiln:prompt_tokens_total"], before)
        self.assertEqual(len(self.create(["a"] * 18, max_tokens=1).choices), 18)


if __name__ == "__main__":
    h.run_tests()
