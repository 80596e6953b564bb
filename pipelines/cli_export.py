"""The `autorl` commands that take a trained agent home: `export` and `chat` (`pipelines.cli` registers them on its app)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from .chat import chat
from .cli_base import USER_ERRORS, HomeOption, err, exit_interrupted, fail, run_async
from .config import DEFAULT_HOME
from .export import DEFAULT_QUANT, FORMATS, SYSTEM_PROMPT, export, parse_quants

TARGET_HELP = (
    "RUN, RUN@latest, RUN@best (the highest validation reward during training, else the highest mean training "
    "reward) or RUN@STEP (see `autorl runs`)."
)


def export_command(
    target: Annotated[str, typer.Argument(metavar="RUN[@WHICH]", help=TARGET_HELP)],
    out: Annotated[Path, typer.Option(help="The directory to write; it must not exist.")],
    format: Annotated[
        str,
        typer.Option(
            "--format",
            help="hf: the LoRA merged into the base weights (safetensors, config, tokenizer with its chat template, "
            "generation config); peft: the LoRA as a PEFT adapter; gguf: GGUF files for llama.cpp, Ollama and "
            "LM Studio, and an Ollama Modelfile.",
        ),
    ] = FORMATS[0],
    quant: Annotated[
        str | None,
        typer.Option(
            help=f"GGUF types, comma-separated (f16, q8_0, q5_0, q4_0); --format gguf only. Default: {DEFAULT_QUANT}."
        ),
    ] = None,
    home: HomeOption = DEFAULT_HOME,
) -> None:
    """Export a run's checkpoint with a model card (README.md: the task, base model and license, judge and its
    audit, training settings and curve, the held-out table with CIs, the sentinel's verdict, cost, autorl's
    version) and the run's system prompt (system_prompt.txt).

    The checkpoint is read from the run's directory, for a run on a Ray cluster (--ray) too. A run trained on an
    `autorl serve` (--backend URL) has its checkpoints copied there after each step; one that is not is fetched
    from the server (its token in AUTORL_TOKEN) into the run's directory first.

    Nothing is written under --out unless the whole export is: it is made beside it and renamed at the end.
    """
    try:
        quants = parse_quants(quant, format) if quant is not None else None
        done = export(home, target, format, out, quants)
    except USER_ERRORS as exc:
        fail(str(exc))
    except KeyboardInterrupt:  # no thread or server to leave behind: an ordinary exit
        fail(f"interrupted; nothing was written to {out}")
    fetched = f" (the checkpoint fetched from {done.fetched_from})" if done.fetched_from else ""
    err.print(
        f"exported {done.run} step {done.step} ({format}){fetched} to {done.out}: {', '.join(done.files)}",
        highlight=False,
        markup=False,
    )
    if done.secret_in_prompt:
        err.print(
            f"warning: the run's system prompt holds what looks like a secret; {SYSTEM_PROMPT}"
            f"{' and the Modelfile' if format == 'gguf' else ''} keep it as the agent was trained with it (the card "
            "shows it redacted): read them before you share the export",
            highlight=False,
            markup=False,
        )


def chat_command(
    target: Annotated[str, typer.Argument(metavar="RUN[@WHICH]", help=TARGET_HELP)],
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Tokens per answer; default: the run's.")] = None,
    temperature: Annotated[
        float | None, typer.Option(min=0.0, help="Sampling temperature; default: the run's.")
    ] = None,
    home: HomeOption = DEFAULT_HOME,
) -> None:
    """Talk to a trained agent in the terminal: the run's system prompt and tools, its checkpoint served by the
    run's own vLLM server (started for the chat), each answer streamed. /reset starts over, /quit (or Ctrl-D) ends."""
    out = Console(soft_wrap=True, highlight=False)

    def write(text: str) -> None:
        out.print(text, end="", markup=False)

    def note(line: str) -> None:
        err.print(line, highlight=False, markup=False)

    try:
        run_async(chat(home, target, {"max_tokens": max_tokens, "temperature": temperature}, write, note))
    except USER_ERRORS as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        exit_interrupted("chat ended")
