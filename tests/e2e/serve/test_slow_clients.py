"""Slow and hostile clients against `kiln serve`: a client that drips its request a byte at a time
gets 408 once the whole-request deadline passes (a drip would reset a per-read timeout), and
SIGTERM closes such a connection, and an idle keep-alive one, so the process exits 0 at once
rather than waiting on them (the deadline is an hour there: only the drain can end it). A wrong
method on a known route gets 405 with Allow. Every wait is bounded by a generous failure guard."""
import http.client
import json
import socket
import threading
import unittest

import serve_harness as h

GUARD = 60  # seconds: failure guards only
PING = b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
DRIPPED_HEADERS = b"GET /ping HTTP/1.1\r\nHost: x\r\nX-Slow: "


class Dripper:
    """A raw client: optional whole requests first (their responses read, so a server thread is
    known to serve the connection), then `start`, then one byte every 50 ms from a thread until
    the server closes the connection or read_to_close() returns."""

    def __init__(self, port, start, preamble=b""):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=GUARD)
        if preamble:
            self.sock.sendall(preamble)
            assert self.read_response().startswith(b"HTTP/1.1 200 ")
        self.sock.sendall(start)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._drip, daemon=True)
        self.thread.start()

    def _drip(self):
        while not self.stopped.wait(0.05):
            try:
                self.sock.sendall(b"a")
            except OSError:
                return

    def read_response(self):
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.sock.recv(4096)
            assert chunk, f"connection closed mid-response: {data!r}"
            data += chunk
        head, body = data.split(b"\r\n\r\n", 1)
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:
            chunk = self.sock.recv(4096)
            assert chunk, "connection closed mid-body"
            body += chunk
        return head + b"\r\n\r\n" + body

    def read_to_close(self):
        """Everything the server sends until it closes; fails after GUARD seconds."""
        data = b""
        try:
            while True:
                chunk = self.sock.recv(4096)
                if not chunk:
                    return data
                data += chunk
        except socket.timeout:
            raise AssertionError(f"the server kept the connection open {GUARD}s: {data!r}")
        finally:
            self.stopped.set()
            self.thread.join(GUARD)
            self.sock.close()


def error_message(answer):
    return json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["message"]


class SlowClientTest(unittest.TestCase):
    def test_dripping_clients_get_408_and_a_wrong_method_405(self):
        with h.Server(h.tiny_artifact(), "--http-header-timeout", "1",
                      "--http-body-timeout", "1") as server:
            headers = Dripper(server.port, DRIPPED_HEADERS).read_to_close()
            self.assertTrue(headers.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), headers)
            self.assertIn(b"\r\nConnection: close\r\n", headers)
            self.assertEqual(error_message(headers), "the request line and headers did not "
                             "arrive within 1 s; the connection is closed")
            body = Dripper(server.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n"
                           b'{"prompt": "').read_to_close()
            self.assertTrue(body.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), body)
            self.assertEqual(error_message(body), "the request body did not arrive within 1 s "
                             "of the headers; the connection is closed")
            status, response_headers, _ = h.http("DELETE", server.url + "/ping")
            self.assertEqual(status, 405)
            self.assertEqual(response_headers.get("Allow"), "GET, HEAD")
            self.assertEqual(server.get("/ping")[0], 200)
            timeouts = [v for k, v in server.metrics().items()
                        if k.startswith("kiln:http_responses_total{") and 'status="408"' in k]
            self.assertEqual(timeouts, [2.0])
            self.assertEqual(server.stop(), 0)

    def test_sigterm_closes_idle_and_dripping_connections_and_exits_0(self):
        with h.Server(h.tiny_artifact(), "--http-header-timeout", "3600") as server:
            idle = http.client.HTTPConnection("127.0.0.1", server.port, timeout=GUARD)
            idle.request("GET", "/ping")
            self.assertEqual(idle.getresponse().read(), b'{"status":"healthy"}')
            dripper = Dripper(server.port, DRIPPED_HEADERS, preamble=PING)
            self.assertEqual(server.stop(timeout=GUARD), 0, server.logs())
            self.assertIn("drain", server.logs())
            self.assertEqual(dripper.read_to_close(), b"")
            idle.sock.settimeout(GUARD)
            self.assertEqual(idle.sock.recv(1), b"")  # closed by the server
            idle.close()


if __name__ == "__main__":
    h.run_tests()
