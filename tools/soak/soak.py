"""Soak test of `kiln serve` (issue 19 section 3; results in docs/reliability.md, "Soak").

Starts `kiln serve ARTIFACT` on a free loopback port and, for --minutes, runs --streams
concurrent streaming OpenAI clients (/v1/completions and /v1/chat/completions, mixed prompt
lengths and max_tokens 1..256; --disconnect of requests hang up mid-stream or while queued,
--bad are malformed or out of range and must get a 4xx with an OpenAI error body), --drippers
clients that send a request a byte every 1-3 s (each must get 408 at the deadline, then
reconnects), a /ping prober every 100 ms (a process of its own), and samples the server's RSS
and open descriptors every 5 s. Then: the streams finish, /metrics must show the engine idle
and no KV block held, the descriptors must be back to their count before the load; a final
burst of streams (plus dripping clients) is cut by SIGTERM, and every stream must complete
with a finish_reason and the process exit 0. Prints a summary, writes WORK/summary.json, and
exits 1 if a criterion fails. scripts/soak.sh compiles the model and runs this."""
import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from soak_clients import Stats, drip_once, dripper_worker, stream_once, stream_request, \
    stream_worker  # noqa: E402
from soak_http import fetch, metrics  # noqa: E402
from serve_wire import free_port  # noqa: E402 (tests/e2e/serve, put on the path by soak_http)
from soak_report import check_criteria, ping_summary, print_summary, rss_growth  # noqa: E402

# Counted from the load's start: the report gives these as differences.
COUNTERS = ("kiln:http_responses_total", "kiln:request_success_total",
            "kiln:requests_cancelled_total", "kiln:generation_tokens_total",
            "kiln:prompt_tokens_total", "kiln:engine_steps_total", "kiln:num_preemptions_total")
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "SUMMARY: AddressSanitizer", "SUMMARY: UndefinedBehaviorSanitizer")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kiln", required=True, help="the kiln binary")
    p.add_argument("--artifact", required=True, help="compiled TinyStories-656K artifact")
    p.add_argument("--chat-template", required=True)
    p.add_argument("--work", required=True, help="directory for the server log and results")
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--streams", type=int, default=256)
    p.add_argument("--drippers", type=int, default=100)
    p.add_argument("--disconnect", type=float, default=0.10)
    p.add_argument("--bad", type=float, default=0.05)
    p.add_argument("--burst", type=int, default=96,
                   help="streams in flight at SIGTERM (more than the artifact's batch of 64)")
    p.add_argument("--ping-max-ms", type=float, default=100)
    p.add_argument("--rss-growth-mb", type=float, default=16,
                   help="most RSS growth allowed between the load's middle and its end")
    p.add_argument("--asan", action="store_true",
                   help="a sanitizer build: RSS growth (ASan's quarantine grows by design) and "
                        "/ping latency (ASan slows every thread) are reported, not judged")
    p.add_argument("--seed", type=int, default=19)
    p.add_argument("server_args", nargs="*", help="more `kiln serve` flags (after --)")
    return p.parse_args()


class ServerProcess:
    def __init__(self, args, port):
        self.port = port
        self.log_path = os.path.join(args.work, "serve.log")
        self.argv = [args.kiln, "serve", args.artifact, "--host", "127.0.0.1", "--port",
                     str(port), "--chat-template", args.chat_template] + args.server_args
        self.proc = None

    def start(self):
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)

    def status_field(self, name):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(name + ":"):
                    return int(line.split()[1])
        raise KeyError(name)

    def sample(self):
        return {"rss_kib": self.status_field("VmRSS"), "threads": self.status_field("Threads"),
                "fds": len(os.listdir(f"/proc/{self.proc.pid}/fd"))}

    def log_text(self):
        self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()


async def wait_ready(server, guard=600):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + guard
    while loop.time() < deadline:
        if server.proc.poll() is not None:
            raise SystemExit(f"kiln serve exited with {server.proc.returncode}:\n"
                             f"{server.log_text()[-3000:]}")
        try:
            if (await fetch(server.port, "GET", "/ping", timeout=5))[0] == 200:
                return
        except (OSError, asyncio.TimeoutError):
            pass
        await asyncio.sleep(0.2)
    raise SystemExit(f"kiln serve did not answer /ping in {guard} s")


async def sampler(server, stop, started, samples, stats):
    """RSS, descriptors, threads and the engine's gauges every 5 s."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        sample = {"t": round(loop.time() - started, 1), **server.sample()}
        try:
            m = await metrics(server.port)
            sample.update(kv_blocks_used=m["kiln:kv_cache_blocks_used"],
                          running=m["kiln:num_requests_running"],
                          waiting=m["kiln:num_requests_waiting"],
                          in_flight=m["kiln:server_requests_in_flight"])
        except (OSError, asyncio.TimeoutError, ValueError, KeyError) as e:
            stats.error("metrics", f"{type(e).__name__}: {e}")
        samples.append(sample)
        try:
            await asyncio.wait_for(stop.wait(), 5)
        except asyncio.TimeoutError:
            pass


async def wait_idle(port, guard=120):
    """/metrics once nothing runs, waits or holds a KV block, with the HTTP side settled."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + guard
    while True:
        m = await metrics(port)
        if (m["kiln:num_requests_running"] == 0 and m["kiln:num_requests_waiting"] == 0
                and m["kiln:kv_cache_blocks_used"] == 0
                and m["kiln:server_requests_in_flight"] == 0):
            return m, True
        if loop.time() > deadline:
            return m, False
        await asyncio.sleep(0.2)


async def settled_fds(server, target, guard=30):
    """The descriptor count once it is at most `target` (closing connections linger ~1 s), or
    whatever it is after `guard` seconds; with no target, once it holds still for 2 s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + guard
    history = []
    while True:
        fds = server.sample()["fds"]
        history.append(fds)
        if target is not None and fds <= target:
            return fds
        if target is None and len(history) >= 5 and len(set(history[-5:])) == 1:
            return fds
        if loop.time() > deadline:
            return fds
        await asyncio.sleep(0.5)


async def run_load(args, server):
    """The timed load; returns (stats, samples, load seconds, seconds the last requests took)."""
    loop = asyncio.get_running_loop()
    stats, samples, stop = Stats(), [], asyncio.Event()
    started = loop.time()
    workers = [asyncio.ensure_future(stream_worker(server.port, random.Random(args.seed * 7919 + i),
                                                   stats, stop, args.disconnect, args.bad))
               for i in range(args.streams)]
    drippers = [asyncio.ensure_future(dripper_worker(
        server.port, random.Random(args.seed * 104729 + i), stats, stop, i))
        for i in range(args.drippers)]
    sampling = asyncio.ensure_future(sampler(server, stop, started, samples, stats))
    await asyncio.sleep(args.minutes * 60)
    stop.set()
    load_seconds = loop.time() - started
    done, pending = await asyncio.wait(workers + drippers, timeout=900)
    for task in pending:
        stats.error("client_stuck", "a client did not finish within 900 s of the load's end")
        task.cancel()
    await sampling
    samples.append({"t": round(loop.time() - started, 1), **server.sample()})
    return stats, samples, load_seconds, loop.time() - started - load_seconds


async def drain(args, server):
    """A burst of long streams, more than the batch holds, and dripping clients; SIGTERM once
    /metrics shows the engine holding every stream (running or waiting). Returns the facts."""
    loop = asyncio.get_running_loop()
    stats, never = Stats(), asyncio.Event()
    at_sigterm = {"streaming": 0, "waiting_for_first_token": 0}
    sigterm_sent = [False]

    async def burst_stream(i):
        rng = random.Random(args.seed * 31 + i)
        path, body, _ = stream_request(rng, max_tokens=rng.randint(192, 256), ignore_eos=True)
        body.pop("n", None)  # one engine request per stream: /metrics counts them
        streaming = []  # its first token came before SIGTERM
        await stream_once(server.port, rng, stats, request=(path, body, 1),
                          on_first=lambda: streaming.append(not sigterm_sent[0]))
        if sigterm_sent[0]:  # it was in flight at SIGTERM
            at_sigterm["streaming" if streaming and streaming[0]
                       else "waiting_for_first_token"] += 1

    streams = [asyncio.ensure_future(burst_stream(i)) for i in range(args.burst)]
    drippers = [asyncio.ensure_future(drip_once(server.port, random.Random(i), stats, never,
                                                in_body=i % 2 == 1, during_drain=True))
                for i in range(10)]
    deadline = loop.time() + 600
    while True:
        m = await metrics(server.port)
        held = m["kiln:num_requests_running"] + m["kiln:num_requests_waiting"]
        if held >= args.burst or loop.time() > deadline:
            break
        await asyncio.sleep(0.02)
    if held < args.burst:
        stats.error("drain_setup", f"the engine held {held:.0f} of {args.burst} streams")
    server.proc.send_signal(signal.SIGTERM)
    sigterm_at = loop.time()
    sigterm_sent[0] = True
    refused = await new_connection_after_sigterm(server)
    done, pending = await asyncio.wait(streams + drippers, timeout=600)
    for task in pending:
        stats.error("drain_stuck", "a stream or dripper still open 600 s after SIGTERM")
        task.cancel()
    try:
        code = await asyncio.wait_for(loop.run_in_executor(None, server.proc.wait), 300)
    except asyncio.TimeoutError:
        server.proc.kill()
        code = "killed: no exit 300 s after SIGTERM"
    return {"stats": stats, "exit_code": code, "streams_at_sigterm": at_sigterm,
            "engine_requests_at_sigterm": {"running": m["kiln:num_requests_running"],
                                           "waiting": m["kiln:num_requests_waiting"]},
            "new_connection_after_sigterm": refused,
            "seconds_to_exit": round(loop.time() - sigterm_at, 1)}


async def new_connection_after_sigterm(server, guard=30):
    """What a new connection gets once the drain began: refused, closed unanswered (accepted
    just before the listener closed) or 503 are right."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + guard
    while loop.time() < deadline:
        try:
            status = (await fetch(server.port, "GET", "/ping", timeout=30))[0]
        except ConnectionRefusedError:
            return "refused"
        except (ConnectionResetError, asyncio.IncompleteReadError):
            return "closed unanswered"
        except (OSError, asyncio.TimeoutError) as e:
            return f"{type(e).__name__}"
        if status == 503:
            return "503"
        if server.proc.poll() is not None:
            return "refused"  # already gone
        await asyncio.sleep(0.05)  # the signal is handled asynchronously
    return "still served 30 s after SIGTERM"


async def main_async(args):
    os.makedirs(args.work, exist_ok=True)
    server = ServerProcess(args, free_port())
    server.start()
    await wait_ready(server)
    warm = Stats()
    for i in range(4):  # every route the load uses, once, so lazy allocations happen first
        await stream_once(server.port, random.Random(i), warm)
    idle_before = await settled_fds(server, None)
    before = server.sample()
    metrics_before = await metrics(server.port)  # the 503s of /ping while loading are in it
    ping_path = os.path.join(args.work, "ping.txt")
    prober = subprocess.Popen([sys.executable, os.path.join(HERE, "soak_ping.py"),
                               str(server.port), ping_path])
    stats, samples, load_seconds, tail_seconds = await run_load(args, server)
    idle_metrics, idle = await wait_idle(server.port)
    fds_after = await settled_fds(server, idle_before)
    after = server.sample()
    prober.send_signal(signal.SIGTERM)
    prober.wait(60)
    drain_facts = await drain(args, server)
    log = server.log_text()
    sanitizer = [line for line in log.splitlines() if any(m in line for m in SANITIZER_MARKERS)]
    result = {
        "argv": server.argv, "minutes": args.minutes, "load_seconds": round(load_seconds, 1),
        "seconds_for_last_requests": round(tail_seconds, 1), "warmup_errors": warm.errors,
        "outcomes": dict(sorted(stats.outcomes.items())), "errors": stats.errors,
        "unexpected_errors": stats.error_count + warm.error_count,
        "dripper_seconds": {k: [round(min(v), 1), round(max(v), 1)]
                            for k, v in stats.dripper_seconds.items()},
        "ping": ping_summary(ping_path),
        "idle_before_load": {**before, "fds_settled": idle_before},
        "after_load": {**after, "fds_settled": fds_after},
        "samples": samples, "rss_growth_second_half_kib": rss_growth(samples, load_seconds),
        "engine_idle_after_load": idle,
        "metrics_after_load": {k: v - metrics_before.get(k, 0) if k.startswith(COUNTERS) else v
                               for k, v in idle_metrics.items()
                               if not k.endswith(("_bucket", "_sum", "_count"))
                               and "_bucket{" not in k},
        "drain": {**{k: v for k, v in drain_facts.items() if k != "stats"},
                  "outcomes": dict(drain_facts["stats"].outcomes),
                  "errors": drain_facts["stats"].errors},
        "drain_unexpected_errors": drain_facts["stats"].error_count,
        "sanitizer_reports": sanitizer[:20], "log_tail": log[-2000:],
    }
    with open(os.path.join(args.work, "summary.json"), "w") as f:
        json.dump(result, f, indent=1)
    failures = check_criteria(result, args)
    print_summary(result, failures, args)
    return 1 if failures else 0


def main():
    args = parse_args()
    started = time.time()
    code = asyncio.run(main_async(args))
    print(f"soak: {'PASS' if code == 0 else 'FAIL'} in {time.time() - started:.0f} s")
    sys.exit(code)


if __name__ == "__main__":
    main()
