"""The `autorl` command line."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console

from .dedup import DEFAULT_VAL_FRACTION
from .errors import AutoRLError

app = typer.Typer(
    help="Train LLM agents with reinforcement learning from a plain-text task description.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True, soft_wrap=True)  # long lines (paths) stay whole in logs
T = TypeVar("T")


def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` on a new event loop. Ctrl-C and SIGTERM (what schedulers and containers send) both
    cancel it: its `finally` blocks stop the servers and record the run, then KeyboardInterrupt is raised
    (see `exit_interrupted`)."""
    loop = asyncio.new_event_loop()
    task = loop.create_task(coroutine)
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, task.cancel)
    try:
        return loop.run_until_complete(task)
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        if leftover := asyncio.all_tasks(loop):
            for pending in leftover:
                pending.cancel()
            loop.run_until_complete(asyncio.gather(*leftover, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()  # unlike asyncio.run, does not wait for worker threads (see exit_interrupted)


def exit_interrupted(message: str) -> NoReturn:
    """Print `message` and end the process now, with status 1.

    The interrupted command's `finally` blocks have run. What can remain is a worker thread blocked in a
    model call (input generation runs in threads; one call can take minutes on CPU), which a normal
    exit would wait for: stop every server this process started and leave without waiting.
    """
    from autorl.vllm_server import stop_all_servers

    print_error(message)
    stop_all_servers()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def print_error(message: str) -> None:
    """The one error line a user sees."""
    err.print(f"[bold red]error:[/bold red] {message}", highlight=False)


def fail(message: str) -> None:
    print_error(message)
    raise typer.Exit(1)


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log debug details.")] = False) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


@app.command("run")
def run_command(
    task: Annotated[str, typer.Argument(help="The task in plain text, or the path of a .toml task file.")],
    steps: Annotated[int, typer.Option(help="Training steps (a rerun continues until this many exist).")] = 10,
    group_size: Annotated[int, typer.Option(help="Rollouts per input; GRPO compares them (at least 2).")] = 4,
    groups_per_step: Annotated[int, typer.Option(help="Inputs (groups) per training step.")] = 2,
    inputs: Annotated[int | None, typer.Option(help="Inputs to generate (train + validation); default: the task's.")] = None,
    eval_samples: Annotated[int, typer.Option(help="Answers per validation input and variant in baseline/evaluate (at least 2).")] = 2,
    model: Annotated[str, typer.Option(help="Base model: embedded:smollm2-135m or a local HF directory.")] = "embedded:smollm2-135m",
    judge: Annotated[str, typer.Option(help="RULER judge model (embedded, openai/gpt-4.1-mini, name@URL) or module:attribute.")] = "embedded",
    generator: Annotated[str, typer.Option(help="Model that writes inputs and the system prompt (embedded, a LiteLLM string, name@URL).")] = "embedded",
    learning_rate: Annotated[float, typer.Option("--learning-rate", "--lr", help="AdamW learning rate of the LoRA.")] = 2e-5,
    max_tokens: Annotated[int, typer.Option(help="Completion token cap per policy answer.")] = 128,
    seed: Annotated[int, typer.Option(help="Seed of input generation and the train/validation split.")] = 0,
    name: Annotated[str | None, typer.Option(help="Run name; default derived from the task and model.")] = None,
    home: Annotated[Path, typer.Option(envvar="AUTORL_HOME", help="Where runs and the artifact cache live.")] = Path(".autorl"),
    port: Annotated[int | None, typer.Option(help="Port of the local vLLM server; default: a free one.")] = None,
    lora_serving: Annotated[str, typer.Option(help="How the server serves the trained LoRA: merged (into the weights, fast on CPU), adapter (vLLM LoRA), auto (merged on CPU, adapter on CUDA).")] = "auto",
    wandb: Annotated[bool, typer.Option("--wandb/--no-wandb", help="Log steps to Weights & Biases (offline unless WANDB_MODE is set).")] = True,
    force: Annotated[list[str] | None, typer.Option(help="Recompute STAGE and the stages after it (repeatable; 'all' for every stage).", metavar="STAGE")] = None,
    resume: Annotated[bool, typer.Option(help="Reuse an existing run name even if its task differs.")] = False,
) -> None:
    """Run the pipeline for TASK: inputs, system prompt, baseline, GRPO training, evaluation, report.

    Every stage is cached by content under HOME/artifacts: a rerun reuses what exists and a killed
    run continues from its last checkpoint.
    """
    from pydantic import ValidationError

    from autorl.rollout import RolloutConfig
    from autorl.task import load_task
    from autorl.vllm_server import ServerConfig
    from pipelines.config import RunConfig
    from pipelines.pipeline import run_pipeline

    try:
        spec = load_task(task)
        config = RunConfig(
            model=model, judge=judge, generator=generator, steps=steps, group_size=group_size,
            groups_per_step=groups_per_step, num_inputs=inputs, eval_samples=eval_samples,
            learning_rate=learning_rate, seed=seed, rollout=RolloutConfig(max_tokens=max_tokens), home=home,
            name=name, wandb=wandb, force=force or [], resume=resume, server=ServerConfig(port=port, lora_serving=lora_serving),
        )  # fmt: skip
        run_async(run_pipeline(spec, config, err))
    except ValidationError as exc:
        first = exc.errors()[0]
        fail(f"--{str(first['loc'][0]).replace('_', '-')}: {first['msg']}")
    except AutoRLError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        exit_interrupted("interrupted; rerun the same command to resume from the last checkpoint")


@app.command("runs")
def runs_command(
    home: Annotated[Path, typer.Option(envvar="AUTORL_HOME", help="Where runs live.")] = Path(".autorl"),
) -> None:
    """List runs with their status, steps and validation rewards."""
    from pipelines.runs import runs_table

    Console().print(runs_table(home))


@app.command("show")
def show_command(
    run: Annotated[str, typer.Argument(help="Run name (see `autorl runs`).")],
    home: Annotated[Path, typer.Option(envvar="AUTORL_HOME", help="Where runs live.")] = Path(".autorl"),
) -> None:
    """Print a run's stages: cache key, whether cached, time, model calls and figures."""
    from pipelines.runs import show_table

    try:
        Console(width=200).print(show_table(home, run))
    except AutoRLError as exc:
        fail(str(exc))


@app.command("inputs")
def inputs_command(
    task: Annotated[str, typer.Argument(help="The task in plain text, or the path of a .toml task file.")],
    num_inputs: Annotated[int | None, typer.Option("--num-inputs", "-n", help="Inputs to generate (train + validation); default: the task's.")] = None,
    out: Annotated[Path, typer.Option(help="JSONL file to write, one input per line; the system prompt goes beside it.")] = Path("inputs.jsonl"),
    generator: Annotated[str, typer.Option(help="Model that writes inputs and the system prompt (embedded, a LiteLLM string, name@URL).")] = "embedded",
    seed: Annotated[int, typer.Option(help="Seed of input generation and the train/validation split.")] = 0,
    val_fraction: Annotated[float, typer.Option(min=0.0, max=0.95, help="Share of the inputs held out for validation.")] = DEFAULT_VAL_FRACTION,
) -> None:
    """Generate a system prompt and N deduplicated train/validation inputs for TASK; print and write them."""
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    from autorl.inputs import GenerationConfig, generate_inputs, write_inputs_jsonl
    from autorl.task import load_task

    try:
        config = GenerationConfig(val_fraction=val_fraction)
        result = generate_inputs(load_task(task), num_inputs, generator, seed, config)
    except AutoRLError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        exit_interrupted("interrupted")
    write_inputs_jsonl(result.inputs, out)
    prompt_path = out.with_suffix(".system_prompt.txt")
    prompt_path.write_text(result.system_prompt + "\n", encoding="utf-8")
    console = Console()
    if result.system_prompt_fallback:
        console.print(f"generated system prompt unusable ({result.system_prompt_fallback}); using the task description")
    console.print(Panel(Text(result.system_prompt), title="system prompt"))
    table = Table("#", "split", "difficulty", "input", show_lines=True)
    for number, row in enumerate(result.inputs, 1):
        table.add_row(str(number), row.split, row.difficulty, Text(row.input))
    console.print(table)
    stats = result.stats
    console.print(
        f"{len(result.train)} train + {len(result.val)} val inputs from {stats.calls} generator calls "
        f"({stats.unique_per_call:.1f} unique per call, {stats.rejected_junk} junk rejected, "
        f"{stats.duplicate_rate:.0%} duplicates before dedup); "
        f"wrote {out} and {prompt_path}",
        highlight=False,
    )


@app.command("benchmark")
def benchmark_command(
    run: Annotated[str, typer.Argument(help="Run whose base model, checkpoints, system prompt, validation inputs and judge are used.")],
    variants: Annotated[str | None, typer.Option(help="Comma-separated: base, RUN@latest, RUN@best, RUN@NNNN, provider/model, name@http://host:port/v1; append +prompt=FILE for another system prompt. Default: base,RUN@latest.")] = None,
    out: Annotated[Path | None, typer.Option(help="Directory for results.md/.csv, winrates.csv, scores.csv, scores.png; default HOME/runs/RUN/benchmark.")] = None,
    inputs: Annotated[Path | None, typer.Option(help="JSONL file whose rows' `input` fields are the inputs; default: the run's validation split.")] = None,
    judge: Annotated[str | None, typer.Option(help="RULER judge model (embedded, openai/gpt-4.1-mini, name@URL) or module:attribute; default: the run's judge.")] = None,
    samples: Annotated[int, typer.Option(min=1, help="Answers per variant and input (averaged per input).")] = 1,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Completion token cap per answer; default: the run's.")] = None,
    home: Annotated[Path, typer.Option(envvar="AUTORL_HOME", help="Where runs and the artifact cache live.")] = Path(".autorl"),
) -> None:
    """Compare agent variants on the same held-out inputs: mean score with 95% CI, win rates, a bar chart.

    Every variant answers every input; a RULER judge scores each input's answers side by side. Answers
    and judge results are cached: a rerun makes no model call. A variant whose model cannot be reached
    is reported as failed and the others finish.
    """
    from benchmarks.head_to_head import BenchmarkConfig, check_finished, run_benchmark
    from benchmarks.scoreboard import RESULTS, markdown_table

    try:
        config = BenchmarkConfig(
            run=run, variants=variants.split(",") if variants else [], out=out, inputs=inputs, judge=judge,
            samples=samples, max_tokens=max_tokens, home=home,
        )  # fmt: skip
        result = run_async(run_benchmark(config, err))
    except AutoRLError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        exit_interrupted("interrupted; rerun the same command to reuse the answers already made")
    Console(width=200).print(markdown_table(result.results), highlight=False, markup=False)
    err.print(f"wrote {result.out / (RESULTS + '.md')}; model calls this run: {result.model_calls}", highlight=False)
    try:
        check_finished(result)
    except AutoRLError as exc:
        fail(str(exc))


if __name__ == "__main__":
    app()
