"""Non-streaming requests whose client disconnects are cancelled: the openai client gives up on a
long batched completion after 0.5 s, and raw clients of /v1/chat/completions, /generate and
/invocations (queued behind it) hang up; /metrics then shows the engine requests cancelled
(kiln:requests_cancelled_total, finished_reason="abort") and nothing left running. The only
wait is a generous bounded one: the counters, not the clock, tell cancelled from finished.
Also: a long non-streaming request still answers a well-formed body to curl, requests and the
openai client once heartbeats began (leading spaces, chunked framing)."""
import json
import socket
import subprocess
import time
import unittest

import openai
import requests

import serve_harness as h

PROMPTS = 64        # x n=16 x 240 tokens: about 250k tokens, tens of seconds on 2 CPU cores
N = 16
MAX_TOKENS = 240


def post_and_hang_up(port, path, body):
    """A raw HTTP client that sends a request and returns its socket unread."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    payload = json.dumps(body).encode()
    s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: "
              b"application/json\r\nContent-Length: " + str(len(payload)).encode() +
              b"\r\n\r\n" + payload)
    return s


class DisconnectTest(unittest.TestCase):
    def test_gone_clients_cancel_non_streaming_requests(self):
        with h.Server(h.tiny_artifact(), "--chat-template", h.CHAT_TEMPLATE) as server:
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused",
                                   max_retries=0, timeout=0.5)
            with self.assertRaises(openai.APITimeoutError):
                client.completions.create(model="tiny-llama", prompt=["Once upon a time"] * PROMPTS,
                                          n=N, max_tokens=MAX_TOKENS,
                                          extra_body={"ignore_eos": True})
            client.close()
            others = [
                ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                          "max_tokens": 200, "ignore_eos": True}),
                ("/generate", {"inputs": "Once", "parameters": {"max_new_tokens": 200,
                                                               "ignore_eos": True}}),
                ("/invocations", {"inputs": "Once", "parameters": {"max_new_tokens": 200,
                                                                  "ignore_eos": True}}),
            ]
            sockets = [post_and_hang_up(server.port, path, body) for path, body in others]
            time.sleep(0.5)
            for s in sockets:
                s.close()
            m = server.wait_idle(timeout=120)
            deadline = time.time() + 30  # the HTTP side settles right after the engine
            while m["kiln:server_requests_in_flight"] != 0 and time.time() < deadline:
                time.sleep(0.1)
                m = server.metrics()
            label = '{finished_reason="%s"}'
            engine_requests = PROMPTS + len(others)
            aborted = m["kiln:request_success_total" + label % "abort"]
            finished = m["kiln:request_success_total" + label % "length"]
            # The batch's first engine requests (16 x 240 tokens each) may finish in the second
            # before the disconnect is seen; every other one was cancelled, nothing else ended
            # them, and the three requests queued behind the batch never ran.
            self.assertEqual(aborted + finished, engine_requests)
            self.assertEqual(m["kiln:requests_cancelled_total"], aborted)
            self.assertLessEqual(finished, PROMPTS // 2)
            print(f"{aborted:.0f} engine requests cancelled, {finished:.0f} finished before the "
                  f"disconnect was seen")
            self.assertLess(m["kiln:generation_tokens_total"], PROMPTS * N * MAX_TOKENS)
            self.assertEqual(m["kiln:server_requests_in_flight"], 0)
            self.assertEqual(m["kiln:kv_cache_blocks_used"], 0)
            # The server goes on serving.
            status, _, _ = server.post("/v1/completions", {"prompt": "Hello", "max_tokens": 2})
            self.assertEqual(status, 200)
            self.assertEqual(server.stop(), 0)

    def test_heartbeat_bodies_parse_in_every_client(self):
        with h.Server(h.tiny_artifact()) as server:
            # 8 prompts x 16 x 200 tokens take about 3 s on 2 CPU cores: the answer turns chunked.
            body = {"prompt": ["Once upon a time"] * 8, "n": N, "max_tokens": 200,
                    "temperature": 0, "ignore_eos": True}
            r = requests.post(server.url + "/v1/completions", json=body, timeout=120)
            self.assertEqual(r.status_code, 200)
            self.assertEqual(r.headers["Content-Type"], "application/json")
            chunked = r.headers.get("Transfer-Encoding") == "chunked"
            self.assertEqual(len(r.json()["choices"]), 8 * N)
            out = subprocess.run(["curl", "-sS", "--max-time", "120", "-H",
                                  "Content-Type: application/json", "-d", json.dumps(body),
                                  server.url + "/v1/completions"], capture_output=True,
                                 timeout=150)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(json.loads(out.stdout)["choices"], r.json()["choices"])
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused",
                                   max_retries=0, timeout=120)
            c = client.completions.create(model="tiny-llama", **{
                k: v for k, v in body.items() if k != "ignore_eos"},
                extra_body={"ignore_eos": True})
            self.assertEqual([x.text for x in c.choices], [x["text"] for x in r.json()["choices"]])
            if not chunked:
                print("note: this machine answered within the first heartbeat interval; the "
                      "heartbeat framing was not exercised")
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    h.run_tests()
