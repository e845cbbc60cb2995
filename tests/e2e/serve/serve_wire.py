"""What `kiln serve` puts on the wire, as its test clients read it: the Prometheus text of
/metrics and SSE data events. Shared by the e2e tests (serve_harness.py) and the soak test
(tools/soak/soak_http.py), so the two parse alike. Standard library only."""
import socket


def free_port():
    """A loopback port nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_metrics(text):
    """Prometheus text -> {"name" or "name{labels}": value}. The model_name label is dropped (a
    server serves one model), so a gauge is found by its name alone and a labelled sample as, for
    example, 'kiln:http_responses_total{status="408"}'."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, value = line.rsplit(" ", 1)
        name, _, labels = key.partition("{")
        labels = ",".join(label for label in labels.rstrip("}").split(",")
                          if label and not label.startswith("model_name="))
        out[name + ("{" + labels + "}" if labels else "")] = float(value)
    return out


def sse_event_data(block):
    """The data of one SSE event (its text between blank lines), or None when a line of it is not
    a data field: kiln, like OpenAI, sends nothing else."""
    lines = block.split("\n")
    if not all(line.startswith("data:") for line in lines):
        return None
    return "\n".join(line[5:].lstrip(" ") for line in lines)
