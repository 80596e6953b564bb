"""The `autorl` command line."""

from __future__ import annotations

import inspect
import logging
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from autorl.agents.tools import Toolbox
from autorl.backends.remote.config import ServeConfig
from autorl.config import LOSS_DEFAULTS
from autorl.inputs.dedup import DEFAULT_VAL_FRACTION
from autorl.inputs.files import GeneratedInputs, check_writable, write_inputs_jsonl
from autorl.inputs.generation import GenerationConfig
from autorl.redaction import RedactingFilter, RedactingStream
from autorl.task import TaskSpec, load_task

from . import staged_run
from .benchmarking.config import BenchmarkConfig
from .benchmarking.scoreboard import RESULTS, markdown_table
from .cli_base import USER_ERRORS, HomeOption, err, exit_interrupted, fail, run_async, user_errors
from .cli_capture import capture_command
from .cli_export import chat_command, export_command
from .cli_options import command_signature, field_flags, given_values
from .config import DEFAULT_HOME, RunConfig
from .runs import calls_table, cost_table, load_run, runs_table, show_table, step_cost_table
from .stages.inputs import generated

app = typer.Typer(
    help="Train LLM agents with reinforcement learning from a plain-text task description.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log debug details.")] = False) -> None:
    if not isinstance(sys.stdout, RedactingStream):  # every line the command prints: no secret's value
        sys.stdout, sys.stderr = RedactingStream(sys.stdout), RedactingStream(sys.stderr)
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    for handler in logging.getLogger().handlers:  # no URL's credentials in a log line
        handler.addFilter(RedactingFilter())


def _per_loss_defaults(name: str) -> str:
    values = ", ".join(f"{loss}: {defaults[name]}" for loss, defaults in LOSS_DEFAULTS.items() if name in defaults)
    return f"Per loss: {values}."


WHERE_IT_TRAINS = "Where it trains: a Ray cluster (ClusterConfig; a task file's cluster table) or an autorl serve"
RUN_FLAGS = field_flags(
    RunConfig,
    {
        "steps": {}, "group_size": {}, "groups_per_step": {}, "max_unscored_steps": {}, "num_inputs": {"names": ("--inputs",)},
        "inputs_file": {"metavar": "FILE"}, "eval_samples": {}, "preflight": {}, "system_prompt_check": {}, "audit_groups": {},
        "learnability_groups": {}, "on_tied": {}, "dynamic_sampling": {}, "tie_search": {}, "validate_every": {}, "patience": {}, "validation_inputs": {}, "model": {}, "judge": {}, "judge_explanations": {},
        "generator": {},
        "seed": {}, "name": {}, "home": {"envvar": "AUTORL_HOME"}, "server.port": {}, "server.lora_serving": {}, "server.enforce_eager": {},
        "server.max_lora_rank": {}, "wandb": {}, "report_to": {"metavar": "TRACKER"},
        "price_per_hour": {"metavar": "USD"}, "budget_usd": {"metavar": "USD"}, "budget_tokens": {"metavar": "N"},
        "otlp_endpoint": {"metavar": "URL"}, "force": {"metavar": "STAGE"}, "resume": {},
        "keep_checkpoints": {"metavar": "POLICY"},
        "sft.file": {"names": ("--sft-file",), "metavar": "FILE"},
        **{f"sft.{name}": {"names": (f"--sft-{name.replace('_', '-')}",)} for name in ("epochs", "batch_size", "peak_lr", "chunk_size", "bootstrap", "min_reward")},
        "sft.*": {"rich_help_panel": "SFT warm-up before RL (ART's JSONL or the policy's own best answers)"},
        "max_steps_off_policy": {"names": ("--async", "--max-steps-off-policy"), "metavar": "N"},
        "rollout.*": {"rich_help_panel": "Rollouts (RolloutConfig)"},
        "train.*": {"rich_help_panel": "Each GRPO update (TrainConfig; a task file's train table)"},
        "train.learning_rate": {"names": ("--learning-rate", "--lr")},
        **{f"train.{name}": {"help_suffix": _per_loss_defaults(name)} for name in set().union(*LOSS_DEFAULTS.values())},
        "trainer.*": {"rich_help_panel": "The LoRA and its trainer (TrainerConfig; a task file's trainer table)"},
        "sentinel.*": {"rich_help_panel": "The reward-hacking sentinel (SentinelConfig; a task file's sentinel table)"},
        "cluster.*": {"rich_help_panel": WHERE_IT_TRAINS},
        "backend": {"metavar": "URL", "rich_help_panel": WHERE_IT_TRAINS},
    },
)  # fmt: skip
"""The `run` command's options: RunConfig fields, every field of its rollout, train, trainer and cluster configs."""


def run_command(
    ctx: typer.Context,
    task: Annotated[str, typer.Argument(help="The task in plain text, or the path of a .toml task file.")],
    max_turns: Annotated[
        int | None,
        typer.Option(min=1, help="Model turns per rollout of a task with tools; default: the task's max_turns (4)."),
    ] = None,
    **values: Any,
) -> None:
    """Run the pipeline for TASK: inputs, system prompt, baseline, preflight checks, the plan (the training aids,
    decided from the checks), an SFT warm-up (--sft-file, --sft-bootstrap, or planned), GRPO training,
    evaluation, report.

    Every stage is cached by content under HOME/artifacts: a rerun reuses what exists and a killed
    run continues from its last checkpoint. A flag overrides the task file's train and trainer tables
    (and --max-turns its max_turns).
    """
    with user_errors(RUN_FLAGS, "interrupted; rerun the same command to resume from the last checkpoint"):
        spec = load_task(task)
        if max_turns is not None:
            spec = spec.model_copy(update={"max_turns": max_turns})
        config = RunConfig.for_task(spec, given_values(ctx, RUN_FLAGS, values))
        run_async(staged_run.run_stages(spec, config, err))


run_command.__signature__ = command_signature(  # type: ignore[attr-defined]
    *list(inspect.signature(run_command, eval_str=True).parameters.values())[:3], flags=RUN_FLAGS
)
app.command("run")(run_command)


@app.command("runs")
def runs_command(
    home: HomeOption = DEFAULT_HOME,
) -> None:
    """List runs with their status, steps and validation rewards."""
    if not home.is_dir():
        fail(f"{home} is no autorl home (no such directory); give --home or AUTORL_HOME of one that ran")
    damaged: list[str] = []
    Console().print(runs_table(home, damaged))
    for line in damaged:  # one line each; the other runs are listed
        err.print(f"[yellow]skipped:[/yellow] {escape(line)}", highlight=False)


@app.command("show")
def show_command(
    run: Annotated[str, typer.Argument(help="Run name (see `autorl runs`).")],
    home: HomeOption = DEFAULT_HOME,
) -> None:
    """Print a run's stages (cache key, whether cached, time, model calls, figures), its model requests
    (per stage: the judge's and the generator's requests, failures by cause, seconds, tokens) and its cost
    (per stage: seconds, tokens, USD; per training step: the fewest, median and most, and the last step's)."""
    try:
        console = Console(width=200)
        console.print(show_table(home, run))
        record = load_run(home, run)
        for table in (calls_table(record), cost_table(record), step_cost_table(record)):
            if table is not None:
                console.print(table)
    except USER_ERRORS as exc:
        fail(str(exc))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a record cut short, or another version's
        fail(f"run {run!r}: its run.json is incomplete ({type(exc).__name__}: {exc}); rerun it to write a whole one")


@app.command("inputs")
def inputs_command(
    task: Annotated[str, typer.Argument(help="The task in plain text, or the path of a .toml task file.")],
    num_inputs: Annotated[
        int | None,
        typer.Option("--num-inputs", "-n", help="Inputs to generate (train + validation); default: the task's."),
    ] = None,
    out: Annotated[
        Path, typer.Option(help="JSONL file to write, one input per line; the system prompt goes beside it.")
    ] = Path("inputs.jsonl"),
    generator: Annotated[
        str, typer.Option(help="Model that writes inputs and the system prompt (embedded, a LiteLLM string, name@URL).")
    ] = RunConfig.model_fields["generator"].default,
    seed: Annotated[
        int, typer.Option(help="Seed of input generation and the train/validation split.")
    ] = RunConfig.model_fields["seed"].default,
    val_fraction: Annotated[
        float, typer.Option(min=0.0, max=0.95, help="Share of the inputs held out for validation.")
    ] = DEFAULT_VAL_FRACTION,
) -> None:
    """Generate a system prompt and N deduplicated train/validation inputs for TASK; print and write them."""
    prompt_path = out.with_suffix(".system_prompt.txt")
    try:
        spec = load_task(task)
        for path in (out, prompt_path):  # before any model call: the generated inputs are never lost
            check_writable(path)
        config = GenerationConfig(val_fraction=val_fraction)
        result = run_async(_inputs_with_tools(spec, num_inputs, generator, seed, config))
    except USER_ERRORS as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        exit_interrupted("interrupted")
    write_inputs_jsonl(result.inputs, out)
    prompt_path.write_text(result.system_prompt + "\n", encoding="utf-8")
    console = Console()
    if result.system_prompt_fallback:
        console.print(f"generated system prompt unusable ({result.system_prompt_fallback}); using the task description")
    console.print(Panel(Text(result.system_prompt), title="system prompt"))
    table = Table("#", "split", "difficulty", "input", show_lines=True)
    for number, row in enumerate(result.inputs, 1):
        table.add_row(str(number), row.split, str(row.difficulty or ""), Text(row.input))
    console.print(table)
    stats = result.stats
    console.print(
        f"{len(result.train)} train + {len(result.val)} val inputs from {stats.calls} generator calls "
        f"({stats.unique_per_call:.1f} unique per call, {stats.rejected_junk} junk rejected, "
        f"{stats.duplicate_rate:.0%} duplicates before dedup); "
        f"wrote {out} and {prompt_path}",
        highlight=False,
    )


async def _inputs_with_tools(
    spec: TaskSpec, n: int | None, generator: str, seed: int, config: GenerationConfig
) -> GeneratedInputs:
    """The inputs stage's inputs (`stages.inputs.generated`), the task's tools opened for it (its MCP servers
    started, then stopped), and a system prompt written from the task."""
    async with await Toolbox.open(spec) as toolbox:
        return await generated(spec, n, generator, seed, toolbox, config, write_system_prompt=True)


BENCHMARK_FLAGS = field_flags(
    BenchmarkConfig,
    {
        "variants": {"metavar": "VARIANT"}, "out": {"metavar": "DIR"}, "inputs": {"metavar": "FILE"}, "judge": {},
        "samples": {}, "max_tokens": {}, "home": {"envvar": "AUTORL_HOME"},
        "optimizer": {"rich_help_panel": "+optimized variants"}, "optimizer_budget": {"rich_help_panel": "+optimized variants"},
        "reflection_model": {"rich_help_panel": "+optimized variants"}, "price_per_hour": {"metavar": "USD"},
    },
)  # fmt: skip
"""The `benchmark` command's options: BenchmarkConfig's fields."""


def benchmark_command(
    ctx: typer.Context,
    run: Annotated[
        str,
        typer.Argument(help="Run whose base model, checkpoints, system prompt, validation inputs and judge are used."),
    ],
    **values: Any,
) -> None:
    """Compare agent variants on the same held-out inputs: mean score with 95% CI, win rates, a bar chart.

    Every variant answers every input; a RULER judge scores each input's answers side by side. A
    VARIANT+optimized first has its prompt tuned on the run's train inputs by a DSPy optimizer (--optimizer),
    the judge as the metric. Each variant's cost (model calls, seconds and USD to make it) is in the table, and
    what this benchmark spent answering and judging is in cost.json.
    Answers, tuned prompts and judge results are cached: a rerun makes no model call. A variant whose
    model cannot be reached is reported as failed and the others finish.
    """
    from pipelines.benchmarking.head_to_head import check_finished, run_benchmark  # dspy: loaded for a benchmark only

    with user_errors(BENCHMARK_FLAGS, "interrupted; rerun the same command to reuse the answers already made"):
        config = BenchmarkConfig(run=run, **given_values(ctx, BENCHMARK_FLAGS, values))
        result = run_async(run_benchmark(config, err))
    Console(width=200).print(markdown_table(result.results), highlight=False, markup=False)
    spent = result.spent
    err.print(
        f"wrote {result.out / (RESULTS + '.md')}; model calls this run: {result.model_calls}, "
        f"{spent['tokens_total']} tokens, ${spent['usd']['total']:.4f}",
        highlight=False,
    )
    try:
        check_finished(result)
    except USER_ERRORS as exc:
        fail(str(exc))


benchmark_command.__signature__ = command_signature(  # type: ignore[attr-defined]
    *list(inspect.signature(benchmark_command, eval_str=True).parameters.values())[:2], flags=BENCHMARK_FLAGS
)
app.command("benchmark")(benchmark_command)


SERVE_FLAGS = field_flags(
    ServeConfig,
    {
        "host": {}, "port": {}, "home": {"envvar": "AUTORL_HOME"}, "token_file": {"metavar": "FILE"},
        "ssl_certfile": {"metavar": "FILE"}, "ssl_keyfile": {"metavar": "FILE"},
        "max_body_mb": {}, "lease_s": {}, "server.lora_serving": {}, "server.max_lora_rank": {},
        "server.max_model_len": {}, "server.kv_cache_bytes": {},
        "limits.*": {"rich_help_panel": "What clients may ask for (ServeLimits)"},
    },
)  # fmt: skip
"""The `serve` command's options: ServeConfig's fields and some of its vLLM servers' (ServerConfig)."""


def serve_command(ctx: typer.Context, **values: Any) -> None:
    """Train and serve models for programs on other machines: `autorl.RemoteBackend(URL, api_key=TOKEN)`.

    Clients register models, send trajectory groups to train and reach each model at URL/v1 (OpenAI-compatible:
    NAME is its newest checkpoint, NAME@NNNN an earlier one where the serving allows). Every request but /health
    needs the token (Authorization: Bearer ...). Binds loopback unless --host says otherwise; serve TLS
    (--ssl-certfile, --ssl-keyfile) or put a TLS proxy in front on a network you do not trust. A restarted
    server resumes every model from its newest checkpoint. Agents in any language are captured under a model's
    rollout addresses (URL/models/NAME/rollouts/ID/v1: RemoteBackend.capture_rollout, finish_rollout).
    """
    from autorl.backends.remote.server import serve  # fastapi: loaded for `autorl serve` only

    with user_errors(SERVE_FLAGS, "stopped"):
        config = ServeConfig(**given_values(ctx, SERVE_FLAGS, values))
        serve(config, announce=lambda line: err.print(line, highlight=False, markup=False))


serve_command.__signature__ = command_signature(  # type: ignore[attr-defined]
    *list(inspect.signature(serve_command, eval_str=True).parameters.values())[:1], flags=SERVE_FLAGS
)
app.command("serve")(serve_command)

app.command("export")(export_command)
app.command("chat")(chat_command)
app.command("capture")(capture_command)

if __name__ == "__main__":
    app()
