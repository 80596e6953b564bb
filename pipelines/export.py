"""`autorl export RUN[@latest|@best|@STEP]`: a run's checkpoint as a merged Hugging Face model (`hf`), a PEFT
adapter (`peft`) or GGUF files with an Ollama Modelfile (`gguf`), each with a model card (`pipelines.model_card`).

A user's mistake (an unknown run or step, an `--out` that exists, a run still training, too little disk) is one
error line before anything is written; the export is made in a temporary directory beside `--out` and renamed
onto it whole, so a failure (a full disk, Ctrl-C) leaves nothing under `--out`.

Every run keeps its checkpoints in its run directory on this machine: a local one, a cluster one (`--ray`: the
driver writes them there) and a remote one (`--backend URL`: copied back from `autorl serve` after each step).
A remote run's checkpoint missing there is fetched from its server (`RemoteBackend.download_checkpoint`, the
token from AUTORL_TOKEN) into the run directory, as the run's own copy-back would have; reading the run directory
joins no Ray cluster and asks no server.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import shutil
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from safetensors import safe_open

from autorl import TrainableModel
from autorl.atomic import atomic_dir
from autorl.backends.run_dir import ensure_writable
from autorl.errors import AutoRLError, DiskFullError
from autorl.export import hf
from autorl.export.gguf_file import QUANTS, write_gguf
from autorl.export.ollama import modelfile
from autorl.redaction import redact_text
from autorl.serving.embedded import embedded_gguf, embedded_model, resolve_base_model
from autorl.serving.merge import LoraMerger

from .model_card import base_identity, model_card
from .records import train
from .run_lock import finished_run
from .run_view import RunView, split_target

FORMATS = ("hf", "peft", "gguf")
DEFAULT_QUANT = "q8_0"
MODELFILE = "Modelfile"
CARD = "README.md"
SYSTEM_PROMPT = "system_prompt.txt"
"""The run's system prompt, beside every export: the agent answers best with the one it was trained with."""
T = TypeVar("T")


@dataclass(frozen=True)
class Exported:
    """What `export` wrote."""

    out: Path
    run: str
    step: int
    files: list[str]
    fetched_from: str | None = None
    """The `autorl serve` the checkpoint was fetched from (None: it was in the run directory)."""
    secret_in_prompt: bool = False
    """Whether the system prompt holds what looks like a secret: the card shows it redacted, while
    system_prompt.txt (and a Modelfile) keep the prompt the agent was trained with."""


def parse_quants(text: str, fmt: str) -> list[str]:
    """The GGUF types of `--quant` (comma-separated), each once; only the gguf format takes them."""
    quants = list(dict.fromkeys(q.strip() for q in text.split(",") if q.strip()))
    if fmt != "gguf":
        raise AutoRLError(f"--quant is for --format gguf; --format {fmt} keeps the base weights' dtype")
    if not quants or any(q not in QUANTS for q in quants):
        raise AutoRLError(f"--quant {text!r}: use one or more of {', '.join(QUANTS)} (comma-separated)")
    return quants


def export(home: Path, target: str, fmt: str, out: Path, quants: list[str] | None = None) -> Exported:
    """Export checkpoint `target` (RUN[@latest|@best|@STEP]) of a run in `home` as `fmt` into the new directory
    `out` (GGUF: one file per type of `quants`, default `DEFAULT_QUANT`)."""
    if fmt not in FORMATS:
        raise AutoRLError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    quants = quants or [DEFAULT_QUANT]
    if unknown := [q for q in quants if q not in QUANTS]:
        raise AutoRLError(f"GGUF type {', '.join(unknown)}: use one or more of {', '.join(QUANTS)}")
    out = Path(out).expanduser()
    if out.exists() or out.is_symlink():
        raise AutoRLError(f"--out {out} exists; give a path that does not (an export never overwrites)")
    if not out.parent.is_dir():
        raise AutoRLError(f"--out {out}: its directory {out.parent} does not exist")
    try:
        tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=out.parent).cleanup()
    except OSError as exc:
        raise AutoRLError(f"--out {out}: its directory {out.parent} takes no files ({exc.strerror})") from None
    name, which = split_target(target)
    run = RunView(home, name, Counter(), connect=False)
    step, fetch = _step(run, which, target)
    base_gguf = None
    if fmt == "gguf":
        if (embedded := embedded_model(run.config.model)) is None:
            raise AutoRLError(
                f"GGUF export takes its tokenizer and metadata from the base model's own GGUF, which the embedded "
                f"models have and {run.config.model} has not: export --format hf and convert that directory with "
                "llama.cpp's convert_hf_to_gguf.py"
            )
        base_gguf = embedded_gguf(embedded)
    base_dir = resolve_base_model(run.config.model)
    identity = base_identity(run.config.model)
    base_name = identity[0]
    gguf_files = [f"model-{quant}.gguf" for quant in quants]
    system_prompt = run.system_prompt()
    secret_in_prompt = redact_text(system_prompt) != system_prompt
    usage = {"hf": _hf_usage(out), "peft": _peft_usage(out, base_name), "gguf": _gguf_usage(run.name, gguf_files)}
    with finished_run(home, name, run.keys["train"]):
        if fetch:  # into the run directory, as the run's own copy-back would have
            ensure_writable(run.policy.run_dir)
            into = run.checkpoint_dir(step).parent
            _from_server(run, target, lambda backend, model: backend.download_checkpoint(model, step, into))
        # the card before any weight is written: what it cannot read fails first
        card = model_card(run, step, fmt, usage[fmt], identity)
        checkpoint = run.checkpoint_dir(step)
        _check_space(out.parent, _bytes_needed(base_dir, checkpoint, fmt, quants))
        with _never_over(out), atomic_dir(out, replace=False) as tmp:
            if fmt == "hf":
                hf.write_merged(base_dir, checkpoint, tmp)
            elif fmt == "peft":
                hf.write_adapter(base_dir, checkpoint, tmp, base_name)
            else:
                weights = LoraMerger(base_dir).merged(checkpoint)
                template = hf.chat_template(base_dir)
                for quant, file in zip(quants, gguf_files, strict=True):
                    write_gguf(base_gguf, weights, template, tmp / file, quant)
                ollama = modelfile(gguf_files[0], template, system_prompt, hf.stop_tokens(base_dir))
                (tmp / MODELFILE).write_text(ollama, encoding="utf-8")
            (tmp / SYSTEM_PROMPT).write_text(system_prompt + "\n", encoding="utf-8")
            (tmp / CARD).write_text(card, encoding="utf-8")
            files = sorted(p.name for p in tmp.iterdir())
    return Exported(out, name, step, files, run.config.backend if fetch else None, secret_in_prompt)


@contextlib.contextmanager
def _never_over(out: Path) -> Iterator[None]:
    """One line, not a traceback, when `out` was made while the export was written (it is left as it was)."""
    try:
        yield
    except FileExistsError:
        raise AutoRLError(
            f"--out {out} was made while the export was written; it is left as it was and the export is not kept: "
            "give a path that does not exist"
        ) from None


def _step(run: RunView, which: str, target: str) -> tuple[int, bool]:
    """The step `which` names, and whether its checkpoint must be fetched: only for a run trained on an `autorl
    serve` whose run directory here lacks what `which` names (no checkpoint at all for latest, the best step by
    the run's records for best, or that step) is the server asked which checkpoints it has."""
    here = [step for step, _ in run.checkpoints()]
    if which == "best":  # the best by the run's records, whose checkpoint may be on the server alone
        missing = train.best_step(run, among=range(1, train.last_step(run) + 1)) not in here
    else:
        missing = not here if which == "latest" else which.isdigit() and int(which) not in here
    if run.config.backend is None or not missing:
        return run.checkpoint_step(which, here), False
    there = _from_server(run, target, lambda backend, model: backend.list_checkpoints(model))
    step = run.checkpoint_step(which, sorted({*here, *there}))
    return step, step not in here


def _from_server(run: RunView, target: str, call: Callable[[Any, TrainableModel], Awaitable[T]]) -> T:
    """`call(backend, model)` with the run's `RemoteBackend` (its token from AUTORL_TOKEN) and policy model, once
    the server answered and took the token; one error line when it is unreachable, refuses, or fails."""
    try:
        backend, model = run.policy.backend, run.policy.model
        backend.check_can_start(model)  # at once: no retries against a server that is down
        return asyncio.run(call(backend, model))
    except AutoRLError as exc:
        raise AutoRLError(
            f"{target} is not in run {run.name!r}'s directory here and could not be fetched from the `autorl serve` "
            f"it trained on: {exc}"
        ) from None


def _gguf_usage(name: str, files: list[str]) -> list[str]:
    return [
        "With llama.cpp (its chat template is in the file):",
        "",
        "```sh",
        f'llama-cli -m {files[0]} -cnv -sys "$(cat {SYSTEM_PROMPT})"',
        "```",
        "",
        "With llama-cpp-python (`pip install llama-cpp-python`; autorl's install.sh builds it):",
        "",
        "```python",
        "from llama_cpp import Llama",
        "",
        f'llm = Llama("{files[0]}", verbose=False)',
        f'system = open("{SYSTEM_PROMPT}").read()',
        'messages = [{"role": "system", "content": system}, {"role": "user", "content": "..."}]',
        'print(llm.create_chat_completion(messages, temperature=0)["choices"][0]["message"]["content"])',
        "```",
        "",
        f"With Ollama (the Modelfile carries the system prompt, the chat format and the stop token; FROM names {files[0]}):",
        "",
        "```sh",
        f"ollama create {name} -f {MODELFILE}",
        f"ollama run {name}",
        "```",
    ]


def _hf_usage(out: Path) -> list[str]:
    return [
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        f'model = AutoModelForCausalLM.from_pretrained("{out.name}")',
        f'tokenizer = AutoTokenizer.from_pretrained("{out.name}")  # its chat template is the one it was trained with',
        "```",
        "",
        f"Or serve it: `vllm serve {out.name}`; publish it: `huggingface-cli upload USER/{out.name} {out.name}`.",
    ]


def _peft_usage(out: Path, base_name: str) -> list[str]:
    return [
        "```python",
        "from peft import PeftModel",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        f'model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained("{base_name}"), "{out.name}")',
        f'tokenizer = AutoTokenizer.from_pretrained("{out.name}")',
        "```",
    ]


def _bytes_needed(base_dir: Path, checkpoint: Path, fmt: str, quants: list[str]) -> int:
    """About what the export writes: the base weights' size (merged), the adapter's, or per GGUF type."""
    if fmt == "peft":
        return sum(p.stat().st_size for p in checkpoint.iterdir() if p.is_file())
    files = sorted(base_dir.glob("*.safetensors"))
    if fmt == "hf":
        return sum(p.stat().st_size for p in files)
    weights = 0
    for file in files:
        with safe_open(file, "pt") as f:
            for key in f.keys():  # noqa: SIM118 (a safetensors file is not iterable)
                shape = f.get_slice(key).get_shape()
                weights += math.prod(shape)
    return int(sum(weights * QUANTS[q].bytes_per_weight() for q in quants))


def _check_space(directory: Path, needed: int) -> None:
    free = shutil.disk_usage(directory).free
    if free < needed:
        raise DiskFullError(
            f"the export needs about {needed / 2**30:.1f} GiB and {directory} has {free / 2**30:.1f} GiB free; "
            "free space there or give another --out"
        )
