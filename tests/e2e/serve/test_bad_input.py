"""Table-driven bad input over HTTP (52 cases): each gets the expected status and names the
offending field in the API's error shape; the server answers a normal request afterwards."""
import json
import unittest

import serve_harness as h

LONG = "word " * 400  # far over the artifact's 256-token max sequence length
MSG = [{"role": "user", "content": "hi"}]

# (path, raw body or JSON value, status, OpenAI param / TGI message fragment)
CASES = [
    ("/v1/completions", b"{not json", 400, None),
    ("/v1/completions", b"", 400, None),
    ("/v1/completions", b"[1,2]", 400, None),
    ("/v1/completions", b'{"prompt": "\xff\xfe"}', 400, None),
    ("/v1/completions", b'{"prompt": "\xed\xa0\x80"}', 400, None),
    ("/v1/completions", {}, 400, "prompt"),
    ("/v1/completions", {"prompt": 12}, 400, "prompt"),
    ("/v1/completions", {"prompt": ["a", [1]]}, 400, "prompt"),
    ("/v1/completions", {"prompt": []}, 400, "prompt"),
    ("/v1/completions", {"prompt": ["a", ""]}, 400, "prompt[1]"),
    ("/v1/completions", {"prompt": ["a", "b", LONG]}, 400, "prompt[2]"),
    ("/v1/completions", {"prompt": [[1], [2, 99999]]}, 400, "prompt[1]"),
    ("/v1/completions", {"prompt": ["a"] * 257}, 400, "prompt"),
    ("/v1/completions", {"prompt": [1, 99999]}, 400, "prompt"),
    ("/v1/completions", {"prompt": LONG}, 400, "prompt"),
    ("/v1/completions", {"prompt": "a", "max_tokens": "ten"}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "a", "max_tokens": -1}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "a", "max_tokens": 100000}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "a", "temperature": -0.1}, 400, "temperature"),
    ("/v1/completions", {"prompt": "a", "temperature": [1]}, 400, "temperature"),
    ("/v1/completions", {"prompt": "a", "top_p": 2}, 400, "top_p"),
    ("/v1/completions", {"prompt": "a", "n": 0}, 400, "n"),
    ("/v1/completions", {"prompt": "a", "n": 1.5}, 400, "n"),
    ("/v1/completions", {"prompt": "a", "stop": {"x": 1}}, 400, "stop"),
    ("/v1/completions", {"prompt": "a", "seed": "abc"}, 400, "seed"),
    ("/v1/completions", {"prompt": "a", "logprobs": 50}, 400, "logprobs"),
    ("/v1/completions", {"prompt": "a", "presence_penalty": 9}, 400, "presence_penalty"),
    ("/v1/completions", {"prompt": "a", "stream": "true"}, 400, "stream"),
    ("/v1/completions", {"prompt": "a", "stream_options": {"include_usage": True}}, 400,
     "stream_options"),
    ("/v1/completions", {"prompt": "a", "logit_bias": {"1": 5}}, 400, "logit_bias"),
    ("/v1/completions", {"prompt": "a", "model": "not-this-model"}, 404, "model"),
    ("/v1/chat/completions", {}, 400, "messages"),
    ("/v1/chat/completions", {"messages": "hello"}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"content": "x"}]}, 400, "messages[0].role"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 7}]}, 400,
     "messages[0].content"),
    ("/v1/chat/completions", {"messages": MSG, "max_completion_tokens": 0}, 400,
     "max_completion_tokens"),
    ("/v1/chat/completions", {"messages": MSG, "top_logprobs": 3}, 400, "top_logprobs"),
    ("/v1/chat/completions", {"messages": MSG, "response_format": {"type": "yaml"}}, 400,
     "response_format"),
    ("/v1/chat/completions", {"messages": MSG, "guided_json": {"type": "string",
                                                                "pattern": "a(?=b)"}}, 400,
     "guided_json"),
    ("/generate", {"inputs": 5}, 400, "inputs"),
    ("/generate", {"inputs": "a", "parameters": {"max_new_tokens": 0}}, 400,
     "parameters.max_new_tokens"),
    ("/generate_stream", {"inputs": "a", "parameters": {"temperature": 0}}, 400,
     "parameters.temperature"),
    ("/invocations", {"text": "a"}, 400, "inputs"),
    ("/invocations", {"inputs": "a", "parameters": "fast"}, 400, "parameters"),
    ("/v1/unknown", {"prompt": "a"}, 404, None),
    # Issue 18: refused until supported, instead of silently accepted.
    ("/v1/completions", {"prompt": "a", "echo": True, "logprobs": 1}, 400, "echo"),
    ("/v1/completions", {"prompt": "a", "n": 17}, 400, "n"),  # compiled --max-batch 16
    ("/v1/chat/completions", {"messages": MSG, "tool_choice": "required"}, 400, "tool_choice"),
    ("/v1/chat/completions", {"messages": MSG, "tool_choice": {
        "type": "function", "function": {"name": "f"}}}, 400, "tool_choice"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}, 400,
     "messages[0].content[1].type"),
    # Numbers that overflow a double, even in an unknown field.
    ("/v1/completions", b'{"prompt": "a", "unknown": 1e309}', 400, "unknown"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], '
                             b'"temperature": -1e400}', 400, "temperature"),
    ("/generate", b'{"inputs": "a", "parameters": {"top_p": 1e999}}', 400,
     "parameters.top_p"),
]


class BadInputTest(unittest.TestCase):
    def test_every_case_then_a_normal_request(self):
        self.assertGreaterEqual(len(CASES), 25)
        with h.Server(h.tiny_artifact(), "--chat-template", h.CHAT_TEMPLATE,
                      "--max-body-bytes", "65536") as server:
            for path, body, status, param in CASES:
                with self.subTest(path=path, body=str(body)[:80]):
                    raw = body if isinstance(body, bytes) else json.dumps(body)
                    got, headers, payload = server.post(path, raw)
                    self.assertEqual(got, status, payload[:300])
                    self.assertNotIn("EXCEPTION_WHAT", {k.upper() for k in headers})
                    self.assertNotIn(b"json.exception.out_of_range", payload)
                    error = json.loads(payload)
                    tgi = path in ("/generate", "/generate_stream", "/invocations")
                    if tgi and "error_type" in error:
                        self.assertEqual(error["error_type"], "validation")
                        if param:
                            self.assertIn(param, error["error"])
                    else:
                        self.assertIn("message", error["error"])
                        self.assertEqual(error["error"]["param"], param)
            # 413: over --max-body-bytes.
            got, _, payload = server.post("/v1/completions", json.dumps({"prompt": "a" * 70000}))
            self.assertEqual(got, 413)
            # A prompt over the limit names both numbers.
            got, _, payload = server.post("/v1/completions", json.dumps({"prompt": LONG}))
            message = json.loads(payload)["error"]["message"]
            self.assertRegex(message, r"the prompt has \d+ tokens; the model's maximum sequence "
                                      r"length is 256")
            # And a normal request still works.
            got, _, payload = server.post("/v1/completions",
                                          json.dumps({"prompt": "Hello", "max_tokens": 3}))
            self.assertEqual(got, 200, payload)
            self.assertEqual(json.loads(payload)["usage"]["completion_tokens"] <= 3, True)
            self.assertEqual(server.stop(), 0)


    def test_chat_without_a_template_is_400_naming_the_flag(self):
        # tiny-llama's tokenizer_config.json has no chat_template.
        with h.Server(h.tiny_artifact()) as server:
            self.assertIn("warning: the artifact has no chat template", server.logs())
            self.assertIn("--chat-template FILE", server.logs())
            body = {"messages": MSG, "max_tokens": 2}
            got, _, payload = server.post("/v1/chat/completions", body)
            self.assertEqual(got, 400, payload)
            self.assertEqual(json.loads(payload), {"error": {
                "message": "this model has no chat template; start kiln serve with "
                           "--chat-template FILE",
                "type": "invalid_request_error", "param": "messages", "code": None}})
            got, _, payload = server.post("/invocations", body)
            self.assertEqual(got, 400, payload)
            self.assertIn("--chat-template", json.loads(payload)["error"]["message"])
            got, _, _ = server.post("/v1/completions", {"prompt": "Hello", "max_tokens": 2})
            self.assertEqual(got, 200)
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    h.run_tests()
