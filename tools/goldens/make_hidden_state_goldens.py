#!/usr/bin/env python3
"""Writes the final hidden states golden of a generation fixture: for each case of its logits
golden (tests/data/golden/<fixture>.json), the rows of
AutoModelForCausalLM(...).model(prompt + greedy ids).last_hidden_state -- after the final norm, what
the lm_head reads -- one per token, fp32, eager attention, CPU, one thread. kiln's executor returns
these rows for a step's logits rows when a sequence asks for them (runtime/exec/step.h
SequenceStep::wantsHidden); tests/e2e/hidden_states_test.cc compares them.

Run from the repo root:  ~/.cache/kiln/torch-venv/bin/python tools/goldens/make_hidden_state_goldens.py
Outputs:
  tests/data/golden/<fixture>.hidden.json              cases (ids, rows, file, sha256), versions
  tests/data/golden/<fixture>.hidden.case<i>.f32       [rows, hidden] little-endian fp32
The script also checks that lm_head(rows) gives the logits golden's rows to 1e-4, so the rows are
the lm_head's input.
"""

import hashlib
import json
import platform
import sys

import numpy as np
import tokenizers
import torch
import transformers

FIXTURES = ["tiny-llama"]
GOLDEN_DIR = "tests/data/golden"


def main():
    torch.set_num_threads(1)
    for fixture in FIXTURES:
        logits_golden = json.load(open(f"{GOLDEN_DIR}/{fixture}.json"))
        model = transformers.AutoModelForCausalLM.from_pretrained(
            logits_golden["model_dir"], dtype=torch.float32, attn_implementation="eager")
        model.eval()
        cases = []
        for i, case in enumerate(logits_golden["cases"]):
            ids = (case["prompt_ids"] + case["greedy_ids"])[: case["logits_rows"]]
            with torch.no_grad():
                hidden = model.model(torch.tensor([ids])).last_hidden_state[0]
                logits = model.lm_head(hidden).numpy()
            rows = hidden.numpy().astype("<f4")
            expected = np.fromfile(f"{GOLDEN_DIR}/{case['logits_file']}", dtype="<f4")
            expected = expected.reshape(case["logits_rows"], -1)[: len(ids)]
            drift = float(np.abs(logits - expected).max())
            if drift > 1e-4:
                sys.exit(f"{fixture} case {i}: lm_head(rows) is {drift} from the logits golden")
            name = f"{fixture}.hidden.case{i}.f32"
            rows.tofile(f"{GOLDEN_DIR}/{name}")
            cases.append({"ids": ids, "rows": len(ids), "hidden_size": rows.shape[1],
                          "hidden_file": name,
                          "hidden_sha256": hashlib.sha256(rows.tobytes()).hexdigest()})
        golden = {
            "model": fixture,
            "model_dir": logits_golden["model_dir"],
            "source": "AutoModelForCausalLM(...).model(ids).last_hidden_state, fp32, eager, CPU",
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "tokenizers": tokenizers.__version__, "numpy": np.__version__,
                         "python": platform.python_version()},
            "tolerance": {"hidden_max_abs": 1e-4},
            "cases": cases,
        }
        with open(f"{GOLDEN_DIR}/{fixture}.hidden.json", "w") as f:
            json.dump(golden, f, indent=1)
            f.write("\n")
        print(f"{fixture}: {len(cases)} cases")


if __name__ == "__main__":
    main()
