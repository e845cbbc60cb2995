"""A small asyncio HTTP/1.1 client for the soak test: one request per connection (Connection:
close), the response head parsed strictly, a chunked or Content-Length body read incrementally,
and SSE events split as they arrive. Standard library only, so hundreds of clients stay cheap."""
import asyncio
import json
import os
import socket
import struct
import sys

# The metrics and SSE parsing the serving e2e tests use (tests/e2e/serve/serve_wire.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "e2e", "serve"))
from serve_wire import parse_metrics, sse_event_data  # noqa: E402


class ProtocolError(Exception):
    """The server's bytes were not the HTTP/SSE the client expected."""


class Response:
    def __init__(self, status, headers, reader):
        self.status = status
        self.headers = headers  # lower-case names
        self._reader = reader
        self._chunked = headers.get("transfer-encoding", "").lower() == "chunked"
        self._remaining = None if self._chunked else int(headers.get("content-length", "-1"))
        self._done = False

    async def read_piece(self, timeout):
        """The next piece of the decoded body, or b"" at its end."""
        if self._done:
            return b""
        if self._chunked:
            line = await asyncio.wait_for(self._reader.readline(), timeout)
            if not line.endswith(b"\r\n"):
                raise ProtocolError(f"connection closed inside the chunked body: {line!r}")
            size = int(line.split(b";", 1)[0], 16)
            data = await asyncio.wait_for(self._reader.readexactly(size + 2), timeout)
            if data[-2:] != b"\r\n":
                raise ProtocolError("a chunk does not end with CRLF")
            if size == 0:
                self._done = True
                return b""
            return data[:-2]
        if self._remaining < 0:  # no length: the body runs to the close
            data = await asyncio.wait_for(self._reader.read(65536), timeout)
            self._done = not data
            return data
        if self._remaining == 0:
            self._done = True
            return b""
        data = await asyncio.wait_for(self._reader.read(min(self._remaining, 65536)), timeout)
        if not data:
            raise ProtocolError(f"connection closed {self._remaining} bytes before the body's end")
        self._remaining -= len(data)
        return data

    async def read_all(self, timeout):
        body = b""
        while True:
            piece = await self.read_piece(timeout)
            if not piece:
                return body
            body += piece

    async def sse_events(self, timeout):
        """Yields each SSE event's data; every line must be a data field (the kiln/OpenAI form)."""
        pending = b""
        while True:
            piece = await self.read_piece(timeout)
            if not piece:
                if pending:
                    raise ProtocolError(f"the stream ends inside an event: {pending[-200:]!r}")
                return
            pending += piece
            while b"\n\n" in pending:
                block, pending = pending.split(b"\n\n", 1)
                data = sse_event_data(block.decode())
                if data is None:
                    raise ProtocolError(f"not an SSE data event: {block[:200]!r}")
                yield data


async def read_head(reader, timeout):
    """(status, headers) of a response; raises ProtocolError on anything malformed."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    lines = head[:-4].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or parts[0] != "HTTP/1.1" or not parts[1].isdigit():
        raise ProtocolError(f"bad status line {lines[0]!r}")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise ProtocolError(f"bad header line {line!r}")
        headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


def request_bytes(method, path, body=b"", extra_headers=()):
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    if body or method == "POST":
        head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    head += list(extra_headers)
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class Connection:
    """One TCP connection to the server (an async context manager)."""

    def __init__(self, port):
        self.port = port
        self.reader = self.writer = None

    async def __aenter__(self):
        self.reader, self.writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", self.port, limit=1 << 20), 60)
        return self

    async def __aexit__(self, *exc):
        self.close()

    def close(self, reset=False):
        if self.writer is None:
            return
        if reset:  # an abortive close: the server sees a RST instead of a FIN
            sock = self.writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.close()
        self.writer = None

    async def send(self, data):
        self.writer.write(data)
        await asyncio.wait_for(self.writer.drain(), 60)

    async def request(self, method, path, body=b"", extra_headers=(), timeout=300):
        await self.send(request_bytes(method, path, body, extra_headers))
        status, headers = await read_head(self.reader, timeout)
        return Response(status, headers, self.reader)


async def fetch(port, method, path, body=b"", timeout=60):
    """(status, headers, body) of one whole request."""
    async with Connection(port) as conn:
        response = await conn.request(method, path, body, timeout=timeout)
        return response.status, response.headers, await response.read_all(timeout)


async def metrics(port):
    status, _, body = await fetch(port, "GET", "/metrics")
    if status != 200:
        raise ProtocolError(f"/metrics answered {status}")
    return parse_metrics(body.decode())


def error_message(body):
    """The message of an OpenAI error body, or None when the body is not one."""
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return None
    return message if isinstance(message, str) and message else None
