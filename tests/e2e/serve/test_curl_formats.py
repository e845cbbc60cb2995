"""curl against every wire format: OpenAI SSE, TGI /generate and /generate_stream, SageMaker
/invocations with TGI, chat and completion bodies, streaming as JSON lines (LMI default) and as
SSE (configured); each stream parsed line by line. Also SageMaker mode's serving.properties and
OPTION_* environment, and contradictions with the artifact rejected at start."""
import json
import os
import subprocess
import tempfile
import unittest

import serve_harness as h


def curl(url, body, *extra):
    """curl -sN (no buffering), returns (status, body)."""
    out = subprocess.run(["curl", "-sS", "-N", "--max-time", "60", "-o", "-", "-w",
                          "\n%{http_code}", "-H", "Content-Type: application/json", "-d",
                          json.dumps(body), *extra, url], capture_output=True, timeout=90)
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode()
    payload, _, status = text.rpartition("\n")
    return int(status), payload


def sagemaker_dir(artifact, properties):
    """An /opt/ml/model look-alike: the artifact's files plus serving.properties."""
    d = tempfile.mkdtemp(dir=h.ARGS.work, prefix="sm-")
    for name in os.listdir(artifact):
        os.symlink(os.path.join(artifact, name), os.path.join(d, name))
    with open(os.path.join(d, "serving.properties"), "w") as f:
        f.write(properties)
    return d


class CurlFormatsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.artifact = h.tiny_artifact()
        cls.server = h.Server(cls.artifact, "--chat-template", h.CHAT_TEMPLATE).__enter__()

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0
        cls.server.__exit__(None, None, None)

    def test_openai_sse_line_by_line(self):
        status, body = curl(self.server.url + "/v1/completions",
                            {"prompt": "Hello", "max_tokens": 6, "temperature": 0,
                             "ignore_eos": True, "stream": True,
                             "stream_options": {"include_usage": True}})
        self.assertEqual(status, 200)
        chunks = h.openai_sse(body)
        self.assertEqual(len(chunks), 6 + 1)
        self.assertTrue(all(c["object"] == "text_completion" for c in chunks))
        self.assertEqual(chunks[-2]["choices"][0]["finish_reason"], "length")
        self.assertEqual(chunks[-1]["usage"]["completion_tokens"], 6)

    def test_tgi_generate_and_stream(self):
        params = {"max_new_tokens": 5, "details": True, "ignore_eos": True}
        status, body = curl(self.server.url + "/generate", {"inputs": "Hello", "parameters": params})
        self.assertEqual(status, 200)
        whole = json.loads(body)
        self.assertEqual(whole["details"]["finish_reason"], "length")
        self.assertEqual(whole["details"]["generated_tokens"], 5)
        status, body = curl(self.server.url + "/generate_stream",
                            {"inputs": "Hello", "parameters": params})
        self.assertEqual(status, 200)
        events = [json.loads(e) for e in h.sse_payloads(body)]
        self.assertEqual([e["index"] for e in events], [1, 2, 3, 4, 5])
        self.assertEqual([e["token"]["id"] for e in events],
                         [t["id"] for t in whole["details"]["tokens"]])
        self.assertEqual(events[-1]["generated_text"], whole["generated_text"])
        self.assertTrue(all(e["generated_text"] is None for e in events[:-1]))

    def test_tgi_eos_finish_reason(self):
        # Generate until the model stops by itself (the fixture's eos is reachable within 200).
        status, body = curl(self.server.url + "/generate",
                            {"inputs": "a", "parameters": {"max_new_tokens": 200,
                                                           "details": True}})
        self.assertEqual(status, 200)
        reason = json.loads(body)["details"]["finish_reason"]
        self.assertIn(reason, ("eos_token", "length"))

    def test_invocations_bodies_json_lines(self):
        url = self.server.url + "/invocations"
        status, body = curl(url, {"inputs": "Hello", "parameters": {"max_new_tokens": 4,
                                                                    "ignore_eos": True}})
        self.assertEqual(status, 200)
        self.assertIn("generated_text", json.loads(body))
        status, body = curl(url, {"inputs": "Hello", "stream": True,
                                  "parameters": {"max_new_tokens": 4, "ignore_eos": True}})
        self.assertEqual(status, 200)
        lines = h.json_lines(body)
        self.assertEqual(len(lines), 4)
        self.assertTrue(all("token" in l and "log_prob" in l["token"] for l in lines))
        self.assertIn("generated_text", lines[-1])
        status, body = curl(url, {"messages": [{"role": "user", "content": "hi"}],
                                  "max_tokens": 3})
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["object"], "chat.completion")
        status, body = curl(url, {"prompt": "hi", "max_tokens": 3, "stream": True})
        self.assertEqual(status, 200)
        chunks = h.json_lines(body)
        self.assertTrue(all(c["object"] == "text_completion" for c in chunks))

    def test_sagemaker_mode_with_properties_env_and_sse(self):
        d = sagemaker_dir(self.artifact, "engine=Python\noption.max_rolling_batch_size=4\n"
                                         "option.output_formatter=sse\n")
        with h.Server(d, "--sagemaker", "--chat-template", h.CHAT_TEMPLATE,
                      env={"OPTION_MAX_MODEL_LEN": "100"}) as sm:
            self.assertEqual(sm.get("/ping")[0], 200)
            models = json.loads(sm.get("/v1/models")[2])
            self.assertEqual(models["data"][0]["max_model_len"], 100)
            status, body = curl(sm.url + "/invocations",
                                {"inputs": "Hello", "stream": True,
                                 "parameters": {"max_new_tokens": 3, "ignore_eos": True}})
            self.assertEqual(status, 200)
            events = [json.loads(e) for e in h.sse_payloads(body)]
            self.assertEqual(len(events), 3)
            self.assertIsNotNone(events[-1]["generated_text"])
            status, body = curl(sm.url + "/invocations",
                                {"prompt": "x" * 120, "max_tokens": 1})
            self.assertEqual(status, 400)
            self.assertIn("100", json.loads(body)["error"]["message"])
            self.assertEqual(sm.stop(), 0)

    def test_contradictions_with_the_artifact_fail_at_start(self):
        d = sagemaker_dir(self.artifact, "option.tensor_parallel_degree=2\n")
        out = subprocess.run([h.ARGS.kiln, "serve", d, "--sagemaker", "--host", "127.0.0.1",
                              "--port", str(h.free_port())], capture_output=True, text=True,
                             timeout=120)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("option.tensor_parallel_degree=2", out.stderr)
        self.assertIn("--tp 1", out.stderr)
        d = sagemaker_dir(self.artifact, "")
        # An s3:// model id is pulled at start (tests/e2e/ship); with no credentials anywhere it
        # fails at once, saying so.
        with tempfile.TemporaryDirectory() as home:
            env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
            env.update(HF_MODEL_ID="s3://bucket/model", HOME=home)
            out = subprocess.run([h.ARGS.kiln, "serve", d, "--sagemaker", "--port",
                                  str(h.free_port()), "--host", "127.0.0.1"],
                                 env=env, capture_output=True, text=True, timeout=120)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("AWS credentials", out.stderr)
        out = subprocess.run([h.ARGS.kiln, "serve", self.artifact, "--max-batch", "64",
                              "--port", str(h.free_port()), "--host", "127.0.0.1"],
                             capture_output=True, text=True, timeout=120)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("--max-batch", out.stderr)


if __name__ == "__main__":
    h.run_tests()
