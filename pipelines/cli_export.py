"""The `autorl` commands that take a trained agent home: `export` and `chat` (`pipelines.cli` registers them on its app)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .cli_base import USER_ERRORS, HomeOption, err, fail
from .config import DEFAULT_HOME
from .export import DEFAULT_QUANT, FORMATS, export, parse_quants

TARGET_HELP = "RUN, RUN@latest, RUN@best (the highest mean training reward) or RUN@STEP (see `autorl runs`)."


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

    Nothing is written under --out unless the whole export is: it is made beside it and renamed at the end.
    """
    try:
        quants = parse_quants(quant, format) if quant is not None else None
        done = export(home, target, format, out, quants)
    except USER_ERRORS as exc:
        fail(str(exc))
    except KeyboardInterrupt:  # no thread or server to leave behind: an ordinary exit
        fail(f"interrupted; nothing was written to {out}")
    err.print(
        f"exported {done.run} step {done.step} ({format}) to {done.out}: {', '.join(done.files)}",
        highlight=False,
        markup=False,
    )
