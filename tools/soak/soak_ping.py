"""GET /ping every INTERVAL seconds on a fresh connection, in a process of its own so the load
generator's event loop cannot delay it; each line of OUT is `seconds_since_start latency_ms
status` (status 0: no answer, with the error after it). Runs until SIGTERM.

  python3 soak_ping.py PORT OUT [INTERVAL]"""
import signal
import socket
import sys
import time

REQUEST = b"GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


def ping(port):
    """(status, latency in ms): connect, send, read to the server's close."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(REQUEST)
        data = b""
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    latency = (time.monotonic() - started) * 1000
    if not data.startswith(b"HTTP/1.1 ") or not data.endswith(b'{"status":"healthy"}'):
        raise OSError(f"unexpected answer {data[:120]!r}")
    return int(data[9:12]), latency


def main():
    port, out_path = int(sys.argv[1]), sys.argv[2]
    interval = float(sys.argv[3]) if len(sys.argv) > 3 else 0.1
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    start = next_at = time.monotonic()
    with open(out_path, "w") as out:
        while not stopping:
            at = time.monotonic() - start
            try:
                status, latency = ping(port)
                out.write(f"{at:.3f} {latency:.2f} {status}\n")
            except OSError as e:
                out.write(f"{at:.3f} 0 0 {type(e).__name__}: {str(e)[:200]}\n")
            out.flush()
            next_at = max(next_at + interval, time.monotonic())
            time.sleep(max(0.0, next_at - time.monotonic()))


if __name__ == "__main__":
    main()
