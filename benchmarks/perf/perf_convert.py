"""The embedded model's first use on a machine: converting its GGUF to a safetensors directory, with the GGUF
parsed once (`autorl.serving.embedded._gguf_parsed_once`, autorl's conversion) against transformers parsing it
for the config, the tokenizer and the weights each (the baseline).

Each conversion runs in a fresh Python process (its imports done before the clock starts) into a temporary
directory, the two modes alternated, `--reps` each; it prints the median seconds of each and their ratio and
writes `results/convert.json`.

    python benchmarks/perf/perf_convert.py   # ~3 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, print_table, ratio_entry, rotations, summary, write_result

CONVERT = """
import contextlib, json, sys, time
from pathlib import Path
import gguf, transformers  # imported before the clock starts, as in a run that converts
from autorl.serving import embedded

if sys.argv[2] == "each":  # the baseline: transformers parses the file for each of its three reads
    embedded._gguf_parsed_once = contextlib.nullcontext
source = embedded.embedded_gguf(embedded.EMBEDDED_MODELS["smollm2-135m"])
started = time.monotonic()
embedded._convert_gguf(source, Path(sys.argv[1]) / "model")
print(json.dumps({"seconds": time.monotonic() - started}))
"""
MODES = {"parsed for each read": "each", "parsed once": "once"}


def convert(mode: str) -> float:
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run(
            [sys.executable, "-c", CONVERT, out, mode], cwd=ROOT, capture_output=True, text=True, check=True
        )
    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    started = time.monotonic()
    seconds: dict[str, list[float]] = {name: [] for name in MODES}
    for name in rotations(list(MODES), args.reps):
        seconds[name].append(convert(MODES[name]))
        print(f"{name}: {seconds[name][-1]:.1f} s", flush=True)
    baseline, ours = (summary(seconds[name]) for name in MODES)
    conditions = f"SmolLM2-135M-Instruct Q4_1 GGUF to safetensors, each in a fresh process, {args.reps} reps"
    rows = [ratio_entry("embedded model conversion", ours["median"], baseline["median"], "s", None, False, conditions)]
    print_table(rows)
    write_result("convert", {"ratios": rows, "seconds": {n: summary(s) for n, s in seconds.items()}}, started)


if __name__ == "__main__":
    main()
