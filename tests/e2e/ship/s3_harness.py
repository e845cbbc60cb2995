"""A real S3-compatible server for the shipping tests: moto in server mode on 127.0.0.1 (a free
port), with IAM authentication switched on so every request's AWS Signature V4 is checked, and a
proxy that plays "the server goes away mid-transfer". Loopback only; every wait is bounded."""
import http.client
import json
import os
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.request

ADMIN_POLICY = json.dumps({"Version": "2012-10-17",
                           "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MotoServer:
    """moto_server on loopback; `env` has the credentials of an IAM user allowed everything."""

    def __init__(self, work):
        self.work = work
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.bin = os.path.dirname(sys.executable)
        self.proc = None
        self.env = None

    def start(self, timeout=60):
        self.log = open(os.path.join(self.work, f"moto-{self.port}.log"), "w")
        self.proc = subprocess.Popen([os.path.join(self.bin, "moto_server"), "-H", "127.0.0.1",
                                      "-p", str(self.port)], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while True:
            try:
                urllib.request.urlopen(self.url + "/moto-api/", timeout=2).read()
                break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError("moto_server did not start")
                time.sleep(0.2)
        # Before authentication is on, any key may create the IAM user whose key signs from then on.
        bootstrap = self.base_env("bootstrap", "bootstrap")
        self.aws(["iam", "create-user", "--user-name", "kiln"], bootstrap)
        self.aws(["iam", "put-user-policy", "--user-name", "kiln", "--policy-name", "all",
                  "--policy-document", ADMIN_POLICY], bootstrap)
        key = json.loads(self.aws(["iam", "create-access-key", "--user-name", "kiln"],
                                  bootstrap))["AccessKey"]
        req = urllib.request.Request(self.url + "/moto-api/reset-auth", data=b"0",
                                     headers={"Content-Type": "text/plain"}, method="POST")
        urllib.request.urlopen(req, timeout=10).read()
        self.env = self.base_env(key["AccessKeyId"], key["SecretAccessKey"])
        self.aws(["s3", "mb", "s3://kiln-test"])
        return self

    def base_env(self, key, secret, endpoint=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret,
                   AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=endpoint or self.url,
                   AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull,
                   KILN_CACHE_DIR=os.path.join(self.work, "cache"))
        return env

    def aws(self, args, env=None, check=True):
        """The AWS CLI (the independent client); returns stdout."""
        result = subprocess.run([os.path.join(self.bin, "aws")] + args, env=env or self.env,
                                capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise AssertionError(f"aws {' '.join(args)} failed: {result.stderr}")
        return result.stdout

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


class DyingProxy:
    """Forwards HTTP requests to `upstream` unchanged (so signatures still verify). The first GET
    whose path contains `victim` gets its headers and half its body, then the connection drops and
    the proxy stops listening: every retry after that finds the server gone."""

    def __init__(self, upstream_port, victim, stall=None):
        # stall: a "METHOD path-substring" request that is held (never forwarded) until `release`
        # is set; `stalled` is set when it arrives, for a test to act at that moment.
        self.stall = stall
        self.stalled = threading.Event()
        self.release = threading.Event()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.upstream_port = upstream_port
        self.victim = victim
        self.requests = []
        proxy = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                proxy.forward(self)

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True

        self.server = Server(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.dead = False

    def forward(self, handler):
        while not self.dead:
            line = handler.rfile.readline()
            if not line:
                return
            method, path, _ = line.decode().split(" ", 2)
            headers = []
            while True:
                h = handler.rfile.readline().decode()
                if h in ("\r\n", "\n", ""):
                    break
                name, value = h.split(":", 1)
                headers.append((name.strip(), value.strip()))
            length = int(dict((k.lower(), v) for k, v in headers).get("content-length", "0"))
            body = handler.rfile.read(length) if length else None
            self.requests.append((method, path))
            if self.stall and f"{method} {path}".startswith(self.stall.split(" ")[0] + " ") \
                    and self.stall.split(" ", 1)[1] in path:
                self.stalled.set()
                self.release.wait(120)
                return
            conn = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=30)
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                conn.putheader(name, value)
            conn.endheaders(body)
            response = conn.getresponse()
            data = response.read()
            head = f"HTTP/1.1 {response.status} {response.reason}\r\n"
            for name, value in response.getheaders():
                if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                    head += f"{name}: {value}\r\n"
            head += f"Content-Length: {len(data)}\r\n\r\n"
            conn.close()
            if method == "GET" and self.victim in path and not self.dead:
                self.dead = True
                handler.wfile.write(head.encode() + data[: len(data) // 2])
                handler.wfile.flush()
                self.server.socket.close()  # nobody answers at this address any more
                return
            handler.wfile.write(head.encode() + data)
            handler.wfile.flush()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
