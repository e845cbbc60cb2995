#!/usr/bin/env python3
"""One line per ctest label after a test run: how many tests ran, skipped (and why), failed.

ctest's own "100% tests passed" counts a skipped test as passed; this summary does not.
Usage: test_summary.py BUILD_DIR JUNIT_XML [--fail-on-skip]
  BUILD_DIR   the ctest build directory (its labels come from `ctest --show-only=json-v1`)
  JUNIT_XML   the file `ctest --output-junit` wrote
  --fail-on-skip  exit 1 when any test skipped other than those labelled gpu (CI: a skip there
                  means a missing input, which is a failure)
Stdlib only (it runs before the Python test dependencies are known to be installed)."""
import collections
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

# Where a skip names its reason: gtest prints "file:line: Skipped" and the GTEST_SKIP message on
# the next line; unittest prints "... skipped 'why'"; the e2e scripts print "skip: why".
UNITTEST_SKIP = re.compile(r"skipped '(.+)'")
SCRIPT_SKIP = re.compile(r"^(?:skip|skipping)\b[: ]+(.+)", re.I)


def labels_by_test(build_dir):
    out = subprocess.run(["ctest", "--show-only=json-v1"], cwd=build_dir, check=True,
                         capture_output=True, text=True).stdout
    labels = {}
    for test in json.loads(out)["tests"]:
        names = []
        for prop in test.get("properties", []):
            if prop["name"] == "LABELS":
                names = prop["value"]
        labels[test["name"]] = names or ["(no label)"]
    return labels


def skip_reason(case):
    lines = [line.strip() for e in case.iter() if e.tag == "system-out"
             for line in (e.text or "").splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if line.endswith(": Skipped") and i + 1 < len(lines):
            return lines[i + 1][:100]
        m = UNITTEST_SKIP.search(line) or SCRIPT_SKIP.match(line)
        if m:
            return m.group(1)[:100]
    return "no reason printed"


def outcome(case):
    if case.find("failure") is not None or case.find("error") is not None:
        return "failed"
    status = case.get("status", "run")
    if case.find("skipped") is not None or status in ("notrun", "disabled"):
        return "skipped"
    if status == "fail":
        return "failed"
    return "ran"


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    build_dir, junit = sys.argv[1], sys.argv[2]
    fail_on_skip = "--fail-on-skip" in sys.argv[3:]
    labels = labels_by_test(build_dir)
    counts = collections.defaultdict(collections.Counter)
    reasons = collections.defaultdict(collections.Counter)
    failed = collections.defaultdict(list)
    bad_skips = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name")
        result = outcome(case)
        for label in labels.get(name, ["(no label)"]):
            counts[label][result] += 1
            if result == "skipped":
                reasons[label][skip_reason(case)] += 1
            if result == "failed":
                failed[label].append(name)
        if result == "skipped" and "gpu" not in labels.get(name, []):
            bad_skips.append(f"{name}: {skip_reason(case)}")
    print("per label: ran (passed) / skipped / failed")
    for label in sorted(counts):
        c = counts[label]
        line = f"  {label:10s} ran {c['ran'] + c['failed']:4d}  skipped {c['skipped']:4d}  " \
               f"failed {c['failed']:4d}"
        if reasons[label]:
            line += "  (skipped: " + "; ".join(
                f"{n} x {r}" for r, n in reasons[label].most_common(4)) + ")"
        if failed[label]:
            line += "  failed: " + ", ".join(failed[label][:5])
        print(line)
    if fail_on_skip and bad_skips:
        print("error (CI): tests skipped that must run here:", file=sys.stderr)
        for line in bad_skips:
            print("  " + line, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
