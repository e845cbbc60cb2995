"""TinyStories-656K (trained weights, a real tokenizer) served and queried with the openai
client: greedy completions equal `kiln generate` (ids and text), and streamed text equals whole."""
import os
import unittest

import openai

import serve_harness as h

PROMPTS = ["Once upon a time, there was a little girl", "The dog ran to the park and"]


class TinyStoriesTest(unittest.TestCase):
    def test_greedy_equals_kiln_generate(self):
        artifact = os.path.join(h.ARGS.work, "tinystories.kiln")
        if not os.path.isdir(artifact):
            raise unittest.SkipTest("tinystories.kiln was not compiled (assets absent)")
        with h.Server(artifact) as server:
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
            for prompt in PROMPTS:
                expected = h.kiln_generate(artifact, prompt, 32)
                r = client.completions.create(model="tinystories", prompt=prompt, max_tokens=32,
                                              temperature=0, extra_body={"return_token_ids": True})
                self.assertEqual(r.choices[0].token_ids, expected["output_ids"])
                self.assertEqual(r.choices[0].text, expected["text"])
                streamed = "".join(
                    c.choices[0].text for c in client.completions.create(
                        model="tinystories", prompt=prompt, max_tokens=32, temperature=0,
                        stream=True))
                self.assertEqual(streamed, expected["text"])
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    h.run_tests()
