"""Process lifecycle and access: SIGTERM drains (stream in flight completes, new connections
refused, exit 0); --api-key with the openai client; queue full -> 503 with Retry-After."""
import http.client
import json
import threading
import time
import unittest

import openai

import serve_harness as h


class LifecycleTest(unittest.TestCase):
    def test_sigterm_finishes_streams_in_flight_and_exits_0(self):
        server = h.Server(h.tiny_artifact()).__enter__()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
            conn.request("POST", "/v1/completions", json.dumps({
                "prompt": "Once", "max_tokens": 200, "ignore_eos": True, "stream": True}),
                {"Content-Type": "application/json"})
            resp = conn.getresponse()
            self.assertEqual(resp.status, 200)
            first = resp.readline()  # the stream has started
            self.assertTrue(first.startswith(b"data: "))
            server.proc.send_signal(15)
            rest = resp.read()
            chunks = h.openai_sse(first + rest)
            self.assertEqual(chunks[-1]["choices"][0]["finish_reason"], "length")
            self.assertEqual(server.proc.wait(60), 0, server.logs())
            self.assertIn("drain", server.logs())
            with self.assertRaises(OSError):
                h.http("GET", server.url + "/ping", timeout=2)
        finally:
            server.__exit__(None, None, None)

    def test_api_key(self):
        with h.Server(h.tiny_artifact(), "--api-key", "sk-kiln-test") as server:
            self.assertEqual(server.get("/ping")[0], 200)
            self.assertEqual(server.get("/health")[0], 200)
            status, headers, body = server.post("/v1/completions", {"prompt": "a"})
            self.assertEqual(status, 401)
            self.assertEqual(json.loads(body)["error"]["code"], "invalid_api_key")
            bad = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-wrong", max_retries=0)
            with self.assertRaises(openai.AuthenticationError):
                bad.models.list()
            good = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-kiln-test",
                                 max_retries=0)
            r = good.completions.create(model="tiny-llama", prompt="Hello", max_tokens=2)
            self.assertEqual(r.usage.completion_tokens, 2)
            self.assertEqual(server.stop(), 0)

    def test_queue_full_is_503_with_retry_after(self):
        with h.Server(h.tiny_artifact(), "--max-batch", "1", "--max-waiting", "0") as server:
            # The only slot is held by a long stream (A) from its admission until the server has
            # seen its end, and a second request (B) sent meanwhile is refused. How long A runs
            # depends on the machine: on a loaded one B may be read only after A ended and then
            # rightly gets a 200. So the race is run again until B meets A in flight (a 503 can
            # only come from that), with a generous guard; a server that never refuses fails it.
            deadline = time.time() + 120
            while True:
                conn, resp, first = self.start_long_stream(server)
                status, headers, body = server.post("/v1/completions", {"prompt": "b",
                                                                        "max_tokens": 1})
                chunks = h.openai_sse(first + resp.read())  # A runs to its end either way
                conn.close()
                self.assertEqual(chunks[-1]["choices"][0]["finish_reason"], "length")
                if status == 503:
                    break
                self.assertEqual(status, 200, body)  # A had ended before B was read
                self.assertLess(time.time(), deadline,
                                "no request met the long stream in flight: never a 503")
            self.assertEqual(headers.get("Retry-After"), "1")
            self.assertEqual(json.loads(body)["error"]["code"], "queue_full")
            # A's slot was released before its last bytes went out, so B now fits.
            status, _, body = server.post("/v1/completions", {"prompt": "b", "max_tokens": 1})
            self.assertEqual(status, 200, body)
            self.assertEqual(server.stop(), 0)

    @staticmethod
    def start_long_stream(server):
        """A 240-token stream, once its first chunk arrived (it is running): (conn, resp, chunk)."""
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
        conn.request("POST", "/v1/completions", json.dumps({
            "prompt": "Once", "max_tokens": 240, "ignore_eos": True, "stream": True}),
            {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200, resp.status
        first = resp.readline()
        assert first.startswith(b"data: "), first
        return conn, resp, first


if __name__ == "__main__":
    h.run_tests()
