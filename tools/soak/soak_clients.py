"""The soak test's clients: streaming OpenAI clients (some hang up mid-stream, some send bad
requests) and dripping clients. Each records an expected outcome in Stats, or an unexpected error
with what it saw."""
import asyncio
import collections
import json

from soak_http import Connection, ProtocolError, error_message, request_bytes

GUARD = 300  # seconds without a byte before a client calls the server stuck (a failure guard)

WORDS = ("once upon a time there was a little girl named lily she liked to play with her dog in "
         "the park one day they saw a big red ball and ran to get it the sun was warm and the "
         "birds sang happy songs tom had a toy car he wanted to share with his friend mom said "
         "be kind and help each other they went home and ate cake").split()

LONG_PROMPT = "word " * 700  # over the artifact's 512-token maximum sequence length


class Stats:
    """Outcome counts; unexpected errors keep their first 40 descriptions."""

    def __init__(self):
        self.outcomes = collections.Counter()
        self.errors = []
        self.dripper_seconds = collections.defaultdict(list)

    def ok(self, outcome):
        self.outcomes[outcome] += 1

    def error(self, kind, detail):
        self.outcomes["UNEXPECTED " + kind] += 1
        if len(self.errors) < 40:
            self.errors.append(f"{kind}: {detail}"[:400])

    @property
    def error_count(self):
        return sum(n for k, n in self.outcomes.items() if k.startswith("UNEXPECTED "))


def prompt_text(rng):
    # Half short prompts, half up to 120 words: mixed prefill lengths.
    count = rng.randint(1, 8) if rng.random() < 0.5 else rng.randint(9, 120)
    return " ".join(rng.choice(WORDS) for _ in range(count))


def stream_request(rng, max_tokens=None, ignore_eos=None):
    """(path, body dict, samples) of a valid streaming request with mixed shapes and lengths."""
    body = {"stream": True, "max_tokens": max_tokens or rng.randint(1, 256),
            "temperature": rng.choice([0, 0.7, 1.0]), "ignore_eos": ignore_eos
            if ignore_eos is not None else rng.random() < 0.5}
    if rng.random() < 0.3:
        body["seed"] = rng.randint(0, 1 << 30)
    if rng.random() < 0.2:
        body["top_p"] = rng.choice([0.5, 0.9])
    samples = 2 if rng.random() < 0.05 else 1
    if samples > 1:
        body["n"] = samples
    if rng.random() < 0.4:
        body["messages"] = [{"role": "user", "content": prompt_text(rng)}]
        if rng.random() < 0.3:
            body["messages"].insert(0, {"role": "system", "content": "tell a short story"})
        return "/v1/chat/completions", body, samples
    if rng.random() < 0.1:
        body["prompt"] = [rng.randint(3, 2047) for _ in range(rng.randint(1, 100))]
    else:
        body["prompt"] = prompt_text(rng)
    if rng.random() < 0.1:
        body["stop"] = ["."]
    return "/v1/completions", body, samples


def check_chunk(chunk, path, finished):
    """Validates one streamed JSON chunk; records finish reasons by choice index."""
    expected = "chat.completion.chunk" if path.endswith("chat/completions") else "text_completion"
    if "error" in chunk:
        raise ProtocolError(f"error event: {chunk['error']}")
    if chunk.get("object") != expected or not isinstance(chunk.get("choices"), list):
        raise ProtocolError(f"unexpected chunk {str(chunk)[:200]}")
    for choice in chunk["choices"]:
        reason = choice.get("finish_reason")
        if reason is not None:
            if choice["index"] in finished:
                raise ProtocolError(f"choice {choice['index']} finished twice")
            finished[choice["index"]] = reason


async def stream_once(port, rng, stats, disconnect_after=None, request=None, on_head=None,
                      on_first=None):
    """One streaming request. disconnect_after: None reads to the end; 0 hangs up as soon as the
    request is sent (while it may wait in the queue); k > 0 after k events. on_head runs when the
    response head arrives (the server writes it once the engine has the request), on_first at the
    first event."""
    path, body, samples = request or stream_request(rng)
    try:
        async with Connection(port) as conn:
            if disconnect_after == 0:
                await conn.send(request_bytes("POST", path, json.dumps(body).encode()))
                await asyncio.sleep(rng.uniform(0, 0.5))
                conn.close(reset=rng.random() < 0.5)
                stats.ok("stream_abandoned_before_reply")
                return
            response = await conn.request("POST", path, json.dumps(body).encode(), timeout=GUARD)
            if response.status != 200:
                stats.error("stream_status", f"{response.status} "
                            f"{(await response.read_all(GUARD))[:300]!r} for {body}")
                return
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                stats.error("stream_type", str(response.headers))
                return
            if on_head:
                on_head()
            events, finished, done = 0, {}, False
            async for data in response.sse_events(GUARD):
                if done:
                    raise ProtocolError("an event after [DONE]")
                if data == "[DONE]":
                    done = True
                    continue
                check_chunk(json.loads(data), path, finished)
                events += 1
                if events == 1 and on_first:
                    on_first()
                if disconnect_after and events >= disconnect_after and len(finished) < samples:
                    conn.close(reset=rng.random() < 0.5)
                    stats.ok("stream_disconnected_mid_stream")
                    return
            if not done:
                raise ProtocolError("the stream ended without [DONE]")
            reasons = set(finished.values())
            if len(finished) != samples or not reasons <= {"stop", "length"}:
                raise ProtocolError(f"finish reasons {finished} for {samples} samples")
            stats.ok("stream_completed")
    except asyncio.TimeoutError:
        stats.error("stream_stalled", f"no byte for {GUARD} s: {path} {body}")
    except (ConnectionError, OSError, asyncio.IncompleteReadError) as e:
        stats.error("stream_connection", f"{type(e).__name__}: {e}")
    except (ProtocolError, ValueError, KeyError, TypeError) as e:
        stats.error("stream_protocol", f"{type(e).__name__}: {e}")


MSG = [{"role": "user", "content": "hi"}]
# (path, raw body or JSON value, accepted statuses, extra header lines)
BAD_REQUESTS = [
    ("/v1/completions", b"{not json", {400}, ()),
    ("/v1/completions", b"", {400}, ()),
    ("/v1/completions", b"[1,2]", {400}, ()),
    ("/v1/completions", b'{"prompt": "\xff\xfe", "stream": true}', {400}, ()),
    ("/v1/completions", {"prompt": "a", "stream": True, "max_tokens": -1}, {400}, ()),
    ("/v1/completions", {"prompt": "a", "stream": True, "max_tokens": 100000}, {400}, ()),
    ("/v1/completions", {"prompt": "a", "stream": True, "temperature": -0.1}, {400}, ()),
    ("/v1/completions", {"prompt": "a", "stream": True, "top_p": 2}, {400}, ()),
    ("/v1/completions", {"prompt": "a", "stream": True, "n": 0}, {400}, ()),
    ("/v1/completions", {"prompt": "a", "stream": "true"}, {400}, ()),
    ("/v1/completions", {"prompt": LONG_PROMPT, "stream": True}, {400}, ()),
    ("/v1/completions", {"prompt": [1, 99999], "stream": True}, {400}, ()),
    ("/v1/completions", {"prompt": "a", "stream": True, "model": "not-this-model"}, {404}, ()),
    ("/v1/completions", b'{"prompt": "a", "temperature": 1e999}', {400}, ()),
    ("/v1/chat/completions", {"messages": "hello", "stream": True}, {400}, ()),
    ("/v1/chat/completions", {"messages": [{"content": "x"}], "stream": True}, {400}, ()),
    ("/v1/chat/completions", {"messages": MSG, "stream": True, "max_completion_tokens": 0},
     {400}, ()),
    ("/v1/unknown", {"prompt": "a"}, {404}, ()),
    ("/v1/completions", {"prompt": "a"}, {431}, ("X-Big: " + "a" * 9000,)),
]


async def bad_request_once(port, rng, stats):
    """A bad request must get its 4xx with an OpenAI error body naming what is wrong."""
    path, body, statuses, extra = rng.choice(BAD_REQUESTS)
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    try:
        async with Connection(port) as conn:
            response = await conn.request("POST", path, raw, extra, timeout=GUARD)
            payload = await response.read_all(GUARD)
    except asyncio.TimeoutError:
        stats.error("bad_request_stalled", f"{path} {raw[:100]!r}")
        return
    except (ConnectionError, OSError, asyncio.IncompleteReadError, ProtocolError) as e:
        stats.error("bad_request_connection", f"{type(e).__name__}: {e} for {raw[:100]!r}")
        return
    if response.status not in statuses or error_message(payload) is None:
        stats.error("bad_request_answer", f"{response.status} {payload[:300]!r} for "
                    f"{path} {raw[:100]!r}")
        return
    stats.ok(f"bad_request_{response.status}")


async def stream_worker(port, rng, stats, stop, disconnect_fraction, bad_fraction):
    """Requests back to back until `stop` is set; the current one always finishes."""
    while not stop.is_set():
        draw = rng.random()
        if draw < bad_fraction:
            await bad_request_once(port, rng, stats)
        elif draw < bad_fraction + disconnect_fraction:
            # A quarter hang up before any reply; the rest after 1 to 40 events.
            after = 0 if rng.random() < 0.25 else rng.randint(1, 40)
            await stream_once(port, rng, stats, disconnect_after=after)
        else:
            await stream_once(port, rng, stats)


DRIP_HEADERS = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Drip: "
DRIP_BODY = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
             b"\r\nContent-Length: 5000\r\n\r\n{\"prompt\": \"")


async def drip_once(port, rng, stats, stop, in_body=False, during_drain=False):
    """A client that sends its request a byte every 1-3 s. Normally it must get 408 once the
    header (or body) deadline passes, then the connection closes; `during_drain`, SIGTERM must
    close it without an answer. Set `stop` abandons it (outcome dripper_abandoned)."""
    mode = "body" if in_body else "headers"
    loop = asyncio.get_running_loop()
    try:
        conn = await Connection(port).__aenter__()
    except (ConnectionError, OSError, asyncio.TimeoutError) as e:
        stats.error("dripper_connect", f"{type(e).__name__}: {e}")
        return
    started = loop.time()
    reading = asyncio.ensure_future(conn.reader.read())  # everything up to the server's close
    try:
        await conn.send(DRIP_BODY if in_body else DRIP_HEADERS)
        while not reading.done():
            await asyncio.wait([reading], timeout=rng.uniform(1, 3))
            if reading.done():
                break
            if stop.is_set() and not during_drain:
                break  # abandoned: the finally closes at once
            if loop.time() - started > GUARD:
                stats.error("dripper_stalled", f"{mode}: no answer in {GUARD} s")
                return
            conn.writer.write(b"a")
            await conn.writer.drain()
    except (ConnectionError, OSError):
        pass  # the server closed first; its answer, if any, is in `reading`
    finally:
        abandoned = stop.is_set() and not during_drain
        if not reading.done() and not abandoned:
            try:
                await asyncio.wait_for(asyncio.shield(reading), GUARD)
            except (asyncio.TimeoutError, ConnectionError, OSError):
                pass
        if not reading.done():
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
        conn.close()
    try:
        answer = reading.result()
    except (ConnectionError, OSError, asyncio.CancelledError) as e:
        answer = f"{type(e).__name__}".encode()
    if stop.is_set() and not during_drain and not answer.startswith(b"HTTP/1.1 408 "):
        stats.ok("dripper_abandoned")
        return
    elapsed = loop.time() - started
    if during_drain:
        if answer in (b"", b"ConnectionResetError"):
            stats.ok("dripper_closed_by_drain")
        else:
            stats.error("dripper_drain", f"{answer[:200]!r}")
        return
    head, _, body = answer.partition(b"\r\n\r\n")
    if (head.startswith(b"HTTP/1.1 408 ") and b"\r\nConnection: close" in head
            and error_message(body) is not None):
        stats.ok(f"dripper_408_{mode}")
        stats.dripper_seconds[mode].append(elapsed)
    else:
        stats.error("dripper_answer", f"{mode} after {elapsed:.1f} s: {answer[:300]!r}")


async def dripper_worker(port, rng, stats, stop, index):
    """Drips back to back (reconnecting after each 408) until `stop`; every 4th drips a body."""
    while not stop.is_set():
        await drip_once(port, rng, stats, stop, in_body=index % 4 == 3)
