"""Shared pieces of the `kiln serve` end-to-end tests: start the server on a free loopback port
with an artifact, wait for /ping, stop it with SIGTERM; strict SSE / JSON-lines parsers; metrics
(parsed by serve_wire.py, which the soak test shares).

Loopback only; every wait is bounded."""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import unittest
import urllib.error
import urllib.request

from serve_wire import free_port, parse_metrics, sse_event_data

ARGS = None
HERE = os.path.dirname(os.path.abspath(__file__))
CHAT_TEMPLATE = os.path.join(HERE, "chat_template.jinja")


def parse_args():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--kiln", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--repo", required=True)
    p.add_argument("--assets", default="")
    ARGS, rest = p.parse_known_args()
    return [sys.argv[0]] + rest


def run_tests():
    argv = parse_args()
    unittest.main(argv=argv, verbosity=2)


def tiny_artifact():
    path = os.path.join(ARGS.work, "tiny-llama.kiln")
    if not os.path.isdir(path):
        raise unittest.SkipTest(f"{path} is missing: the compile fixture did not run")
    return path


def http(method, url, body=None, headers=None, timeout=60):
    """(status, headers, body bytes) without raising on 4xx/5xx."""
    data = body if body is None or isinstance(body, bytes) else body.encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None and "Content-Type" not in (headers or {}):
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


class Server:
    """`kiln serve ARTIFACT` on 127.0.0.1:<free port>; a context manager."""

    def __init__(self, artifact, *extra, env=None, port=None, ready_timeout=120):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(ARGS.work, f"serve-{self.port}.log")
        self.args = [ARGS.kiln, "serve"] + ([artifact] if artifact else []) + [
            "--host", "127.0.0.1", "--port", str(self.port)] + list(extra)
        self.env = dict(os.environ, **(env or {}))
        self.ready_timeout = ready_timeout
        self.proc = None

    def __enter__(self):
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=self.env)
        deadline = time.time() + self.ready_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"kiln serve exited with {self.proc.returncode}: {self.logs()}")
            try:
                status, _, _ = http("GET", self.url + "/ping", timeout=2)
                if status == 200:
                    return self
            except (urllib.error.URLError, ConnectionError, socket.timeout):
                pass
            time.sleep(0.1)
        self.kill()
        raise AssertionError(f"kiln serve did not answer /ping 200 in {self.ready_timeout}s: "
                             f"{self.logs()}")

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.stop()
        self.log.close()

    def stop(self, timeout=60):
        """SIGTERM; returns the exit code (kills and fails after `timeout`)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"kiln serve did not exit {timeout}s after SIGTERM")

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def logs(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()[-4000:]

    def post(self, path, body, headers=None, timeout=120):
        payload = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return http("POST", self.url + path, payload, headers, timeout)

    def get(self, path, headers=None):
        return http("GET", self.url + path, None, headers)

    def metrics(self):
        status, _, body = self.get("/metrics")
        assert status == 200, status
        return parse_metrics(body.decode())

    def wait_idle(self, timeout=10):
        """Polls /metrics until no request runs or waits and no KV block is held."""
        deadline = time.time() + timeout
        m = {}
        while time.time() < deadline:
            m = self.metrics()
            if (m["kiln:num_requests_running"] == 0 and m["kiln:num_requests_waiting"] == 0
                    and m["kiln:kv_cache_blocks_used"] == 0):
                return m
            time.sleep(0.05)
        raise AssertionError(f"engine not idle after {timeout}s: running "
                             f"{m.get('kiln:num_requests_running')}, blocks used "
                             f"{m.get('kiln:kv_cache_blocks_used')}")


def sse_payloads(body):
    """Strict SSE parse: every line is a data field, every event ends with a blank line."""
    text = body.decode() if isinstance(body, bytes) else body
    assert text.endswith("\n\n"), f"stream does not end with a blank line: {text[-200:]!r}"
    events = []
    for block in text[:-2].split("\n\n"):
        data = sse_event_data(block)
        assert data is not None, f"not an SSE data event: {block!r}"
        events.append(data)
    return events


def openai_sse(body):
    """OpenAI stream: JSON chunks then exactly one final [DONE]."""
    events = sse_payloads(body)
    assert events and events[-1] == "[DONE]", f"no final [DONE]: {events[-3:]}"
    assert "[DONE]" not in events[:-1]
    return [json.loads(e) for e in events[:-1]]


def json_lines(body):
    text = body.decode() if isinstance(body, bytes) else body
    assert text.endswith("\n"), f"JSON lines do not end with a newline: {text[-100:]!r}"
    lines = text[:-1].split("\n")
    assert all(lines), "empty JSON line"
    return [json.loads(l) for l in lines]


def kiln_generate(artifact, prompt, max_tokens):
    """`kiln generate ARTIFACT --prompt TEXT --max-tokens N` as a dict."""
    out = subprocess.run([ARGS.kiln, "generate", artifact, "--prompt", prompt, "--max-tokens",
                          str(max_tokens)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[0])
