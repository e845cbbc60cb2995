"""Load: 256 concurrent streaming clients, 3 requests each, bounded in time: zero errors, every
stream complete and well-formed, the KV pool back to empty afterwards. Disconnects: clients killed
mid-stream cancel their requests and the blocks come back."""
import http.client
import json
import subprocess
import threading
import time
import unittest

import serve_harness as h

CLIENTS = 256
REQUESTS_EACH = 3
MAX_TOKENS = 16
DEADLINE_S = 300


def stream_once(port, prompt):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    body = json.dumps({"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0.7,
                       "seed": 1, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}})
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    payload = resp.read()
    conn.close()
    if resp.status != 200:
        raise AssertionError(f"status {resp.status}: {payload[:200]!r}")
    chunks = h.openai_sse(payload)
    tokens = [c for c in chunks if c["choices"]]
    if len(tokens) != MAX_TOKENS or tokens[-1]["choices"][0]["finish_reason"] != "length":
        raise AssertionError(f"incomplete stream: {len(tokens)} token chunks")
    if chunks[-1]["usage"]["completion_tokens"] != MAX_TOKENS:
        raise AssertionError(f"usage {chunks[-1]['usage']}")
    return "".join(c["choices"][0]["text"] for c in tokens)


class LoadTest(unittest.TestCase):
    def test_256_concurrent_streams(self):
        with h.Server(h.tiny_artifact(), "--max-waiting", "512") as server:
            errors, done = [], []
            lock = threading.Lock()
            start = threading.Barrier(CLIENTS)

            def client(i):
                try:
                    start.wait(60)
                    for r in range(REQUESTS_EACH):
                        stream_once(server.port, f"client {i} request {r}: once upon a time")
                    with lock:
                        done.append(i)
                except Exception as e:  # noqa: BLE001 - every failure is collected and reported
                    with lock:
                        errors.append(f"client {i}: {e!r}")

            t0 = time.time()
            threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(max(1.0, DEADLINE_S - (time.time() - t0)))
            elapsed = time.time() - t0
            self.assertFalse(any(t.is_alive() for t in threads), f"clients still running after "
                                                                   f"{DEADLINE_S}s")
            self.assertEqual(errors, [])
            self.assertEqual(len(done), CLIENTS)
            m = server.wait_idle()
            self.assertGreaterEqual(m["kiln:generation_tokens_total"],
                                    CLIENTS * REQUESTS_EACH * MAX_TOKENS)
            print(f"{CLIENTS * REQUESTS_EACH} streams of {MAX_TOKENS} tokens in {elapsed:.1f}s")
            self.assertEqual(server.stop(), 0)

    def test_killed_clients_free_their_blocks(self):
        with h.Server(h.tiny_artifact()) as server:
            body = json.dumps({"prompt": "a long story", "max_tokens": 230, "ignore_eos": True,
                               "stream": True})
            procs = [subprocess.Popen(["curl", "-sS", "-N", "--max-time", "120", "-H",
                                       "Content-Type: application/json", "-d", body,
                                       server.url + "/v1/completions"],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                     for _ in range(24)]
            # Each client dies right after the first part of its stream arrived.
            for p in procs:
                self.assertTrue(p.stdout.read(200))
                p.kill()
            for p in procs:
                p.wait(10)
                p.stdout.close()
            m = server.wait_idle(timeout=10)
            label = '{finished_reason="%s"}'
            aborted = m["kiln:request_success_total" + label % "abort"]
            finished = m["kiln:request_success_total" + label % "length"]
            # A client killed after its stream's last chunk was sent could not cancel; every
            # other one did, and nothing else ended them.
            self.assertEqual(aborted + finished, 24)
            self.assertGreaterEqual(aborted, 12)
            self.assertEqual(m["kiln:kv_cache_blocks_used"], 0)
            # The server goes on serving.
            status, _, _ = server.post("/v1/completions", {"prompt": "Hello", "max_tokens": 2})
            self.assertEqual(status, 200)
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    h.run_tests()
