"""The embedded model's first use converts its GGUF once into the user cache; two processes that start on an
empty cache at once (two runs, two test workers) convert it once, and both get the whole directory. The
conversion itself (seconds of dequantizing) is replaced by one that records each call and takes a while."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers.limits import scaled

RESOLVE = """
import sys, time
from pathlib import Path
from autorl.serving import embedded

def convert(gguf, target):
    with open(sys.argv[1], "a") as calls:
        calls.write("converted\\n")
    time.sleep(1)
    target.mkdir(parents=True)
    (target / "model.safetensors").write_text("weights")

embedded._convert_gguf = convert
print("resolving", flush=True)
sys.stdin.readline()
print(embedded.resolve_base_model("embedded:smollm2-135m"))
"""


def test_two_first_uses_at_once_convert_the_embedded_model_once(tmp_path):
    env = {**os.environ, "AUTORL_CACHE": str(tmp_path / "cache")}
    calls = tmp_path / "calls"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", RESOLVE, str(calls)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for process in processes:  # both imported: now let them resolve together
        assert process.stdout.readline() == "resolving\n"
    for process in processes:
        process.stdin.write("go\n")
        process.stdin.flush()
    outputs = [process.communicate(timeout=scaled(60)) for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs
    assert calls.read_text() == "converted\n"
    model = tmp_path / "cache" / "models" / "smollm2-135m"
    assert {out.strip() for out, _ in outputs} == {str(model)}
    assert {path.name for path in model.iterdir()} == {"model.safetensors", "chat_template.jinja"}


def test_the_conversion_parses_the_gguf_once_and_writes_what_the_cached_one_holds(tmp_path, monkeypatch):
    """transformers reads the GGUF for the config, the tokenizer and the weights; `_convert_gguf` has it parsed
    once, and what it writes is what the cache the suite's servers use holds (tensors, tokenizer, config)."""
    import gguf
    import torch
    from safetensors.torch import load_file

    from autorl.serving import embedded

    parses = []

    class Counted(gguf.GGUFReader):
        def __init__(self, path, mode="r"):
            parses.append(os.fspath(path))
            super().__init__(path, mode)

    monkeypatch.setattr(gguf, "GGUFReader", Counted)
    cached = embedded.resolve_base_model(embedded.DEFAULT_BASE_MODEL)  # converted before, or now
    parses.clear()
    source = embedded.embedded_gguf(embedded.EMBEDDED_MODELS["smollm2-135m"])
    embedded._convert_gguf(source, tmp_path / "model")
    assert parses == [os.fspath(source)]
    ours, theirs = load_file(tmp_path / "model" / "model.safetensors"), load_file(cached / "model.safetensors")
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    for name in ("tokenizer.json", "config.json"):
        assert (tmp_path / "model" / name).read_text() == (cached / name).read_text()
