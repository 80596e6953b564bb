"""Tool calls a small model actually makes: how many of its intended calls vLLM's parser loses, and how many the
agent loop's reading (autorl/agents/call_reading.py) recovers, on the same sampled answers.

    python benchmarks/perf/tool_calls.py [--task benchmarks/perf/learning_tasks/directory.toml] [--samples 4]
        [--tool-choice auto[,required][,required+strict]] [--max-tokens 128] [--out NAME]

Serves the embedded model (SmolLM2-135M-Instruct) on a vLLM server as a run does (autorl's chat template with
Hermes tools, `--tool-call-parser hermes`), and answers every input of the task's inputs file `--samples` times
from the task text alone (the system prompt a run starts from: the description), with the task's tools
offered: the first turn of a rollout. Each answer is classified by what its text holds (`CATEGORIES`) and its
calls run through the task's real toolbox twice: as vLLM's parser returned them (the baseline) and as
`agent_rollout` runs them (`turn_calls`). A valid call is one the tool answered (no `error:` text). Per
`--tool-choice` (`required`: vLLM constrains the answer to a call of the tools by structured output, the
first-turn exploration aid; `+strict`: each tool offered with `strict: true`, so vLLM holds a call's arguments to
the tool's schema, `RolloutConfig.strict_tools`), it reports the share of answers with a valid call, the baseline's and ours, each
per input first with a 95% CI over the inputs, the counts per category and repair, and a few answers of each
category. Writes `benchmarks/perf/results/tool_calls_<task>.json` (`--out` names another file).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from _common import LEARNING_TASKS, Loop, write_result
from openai import AsyncOpenAI

from autorl.agents.call_reading import TurnCalls
from autorl.agents.rollout import Complete, RolloutConfig, openai_completion, tool_calls, turn_calls
from autorl.agents.tools import Toolbox
from autorl.serving.config import ServerConfig
from autorl.serving.embedded import DEFAULT_BASE_MODEL, resolve_base_model
from autorl.serving.vllm_server import VLLMServer
from autorl.task import TaskSpec, load_task
from pipelines.stats import mean_ci

CATEGORIES = (
    "server_call",  # vLLM's parser read a call of a known tool with its arguments as they are
    "server_call_repaired",  # it read a call whose name or arguments autorl repaired (misspelled, a JSON string)
    "server_call_unknown_tool",  # it read a call naming no tool of the task
    "recovered_from_text",  # no call read by vLLM; autorl read one from a block or the prose
    "invalid_attempt",  # a call written but not readable as one tool's (`TurnCalls.invalid`)
    "names_tool_in_prose",  # no call, but the reply names a tool
    "no_call",
)
EXAMPLES_PER_CATEGORY = 3
CONCURRENCY = 64
"""Requests in flight at once: on a shared CPU, one large batch decodes more tokens a second than small ones."""
REQUEST_TIMEOUT_S = 3600


def category(raw: list[tuple[str, str, str]], read: TurnCalls, text: str, tools: list[str]) -> str:
    """Which of `CATEGORIES` an answer is: its calls as vLLM's parser returned them (`raw`), as autorl reads
    them (`read`, a `TurnCalls`), and its text."""
    if raw:
        if any(not call.known for call in read.calls):
            return "server_call_unknown_tool"
        return "server_call_repaired" if read.recovered else "server_call"
    if read.calls:
        return "recovered_from_text"
    if read.invalid:
        return "invalid_attempt"
    return "names_tool_in_prose" if any(tool in text for tool in tools) else "no_call"


async def answer(complete: Complete, task: TaskSpec, toolbox: Toolbox, text: str) -> dict:
    """One first turn of a rollout on the input `text` (as `agent_rollout` asks for it): its category, calls and
    whether the tool answered them."""
    messages = [{"role": "system", "content": task.description}, {"role": "user", "content": text}]
    turn = await complete(messages, toolbox.openai_tools())
    raw, content = tool_calls(turn.item), turn.item.message.content or ""
    names = list(toolbox.tools)
    read = turn_calls(turn.item, names, 1)
    baseline = [(await toolbox.call(name, arguments)).ok for _, name, arguments in raw]
    ours = [(await toolbox.call(call.name, call.arguments)).ok for call in read.calls]
    return {
        "input": text,
        "category": category(raw, read, content, names),
        "text": content if not raw else json.dumps([{"name": n, "arguments": a} for _, n, a in raw]),
        "calls": len(read.calls),
        "repairs": [repair for call in read.calls for repair in call.repairs],
        "where": [call.where for call in read.calls],
        "invalid": read.invalid,
        "valid_baseline": any(baseline),
        "valid_ours": any(ours),
    }


def rate(answers: list[dict], key: str) -> dict:
    """The share of answers where `key` holds: the mean over inputs of each input's share, its 95% CI."""
    by_input: dict[str, list[float]] = {}
    for one in answers:
        by_input.setdefault(one["input"], []).append(float(one[key]))
    mean, low, high = mean_ci([sum(v) / len(v) for v in by_input.values()])
    return {"mean": round(mean, 4), "ci": [round(low, 4), round(high, 4)], "answers": sum(a[key] for a in answers)}


def summary(answers: list[dict]) -> dict:
    """What one `--tool-choice` gave: valid-call rates (vLLM's parser alone, with autorl's reading), answers
    per category, calls read per place and repair, answers with several calls, and a few answers per category."""
    categories = Counter(a["category"] for a in answers)
    examples = {c: [a["text"] for a in answers if a["category"] == c][:EXAMPLES_PER_CATEGORY] for c in CATEGORIES}
    attempted = sum(categories[c] for c in CATEGORIES[:5])
    lost = sum(a["valid_ours"] and not a["valid_baseline"] for a in answers)
    return {
        "answers": len(answers),
        "valid_call_rate": {"vllm_parser": rate(answers, "valid_baseline"), "autorl": rate(answers, "valid_ours")},
        "attempted_calls": attempted,
        "valid_calls_lost_to_vllm_parser": lost,
        "categories": {c: categories[c] for c in CATEGORIES},
        "read_from": dict(Counter(w for a in answers for w in a["where"])),
        "repairs": dict(Counter(r for a in answers for r in a["repairs"])),
        "invalid": dict(Counter(reason.split(" named ")[0] for a in answers for reason in a["invalid"])),
        "several_calls": sum(a["calls"] > 1 for a in answers),
        "examples": {c: texts for c, texts in examples.items() if texts},
    }


async def measure(
    server: VLLMServer, task: TaskSpec, inputs: list[str], args: argparse.Namespace, done: Callable[[dict], None]
) -> None:
    """Answer the inputs under each `--tool-choice`, handing `done` the figures so far after each (a slow shared
    machine keeps what it measured)."""
    client = AsyncOpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0, timeout=REQUEST_TIMEOUT_S)
    limit = asyncio.Semaphore(CONCURRENCY)
    results: dict[str, dict] = {}
    async with await Toolbox.open(task) as toolbox:
        for mode in args.tool_choice.split(","):
            tool_choice, _, extra = mode.partition("+")
            rollout = RolloutConfig(
                max_tokens=args.max_tokens, temperature=args.temperature, tool_choice=tool_choice,
                strict_tools=extra == "strict",
            )  # fmt: skip
            complete = openai_completion(client, "policy", rollout)

            async def one(text: str, complete: Complete = complete) -> dict:
                async with limit:
                    return await answer(complete, task, toolbox, text)

            started = time.monotonic()
            answers = await asyncio.gather(*(one(text) for text in inputs for _ in range(args.samples)))
            results[mode] = {**summary(list(answers)), "seconds": round(time.monotonic() - started, 1)}
            done(results)
    await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", type=Path, default=LEARNING_TASKS / "directory.toml", help="A task file with tools.")
    parser.add_argument("--samples", type=int, default=4, help="Answers per input.")
    parser.add_argument(
        "--tool-choice", default="auto", help="Comma-separated: auto, required, each +strict too (each measured)."
    )
    parser.add_argument("--max-tokens", type=int, default=128, help="Completion tokens per answer (a run's default).")
    parser.add_argument("--temperature", type=float, default=1.0, help="Sampling temperature (a run's default).")
    parser.add_argument("--out", default=None, help="Result name (default tool_calls_<task>).")
    args = parser.parse_args()
    task = load_task(args.task)
    if not task.has_tools() or task.inputs_file is None:
        raise SystemExit(f"{args.task} needs [[tools]] and an inputs_file")
    rows = [json.loads(line) for line in Path(task.inputs_file).read_text().splitlines() if line.strip()]
    inputs = [row["input"] for row in rows]
    started, loop = time.monotonic(), Loop()
    home = Path(tempfile.mkdtemp(prefix="autorl-tool-calls-"))
    server = VLLMServer(resolve_base_model(DEFAULT_BASE_MODEL), "policy", home / "vllm.log", ServerConfig())
    command = ["python", "benchmarks/perf/tool_calls.py", *sys.argv[1:]]
    record = {"command": command, "task": str(args.task), "model": DEFAULT_BASE_MODEL, "inputs": len(inputs)}
    record |= {"samples": args.samples, "max_tokens": args.max_tokens, "temperature": args.temperature}

    def done(results: dict[str, dict]) -> None:
        choice, figures = list(results.items())[-1]
        ours, theirs = figures["valid_call_rate"]["autorl"], figures["valid_call_rate"]["vllm_parser"]
        print(
            f"tool_choice={choice}: {figures['answers']} answers, valid calls {theirs['answers']} by vLLM's parser "
            f"({theirs['mean']:.3f} [{theirs['ci'][0]:.3f}, {theirs['ci'][1]:.3f}]) -> {ours['answers']} with autorl's "
            f"reading ({ours['mean']:.3f} [{ours['ci'][0]:.3f}, {ours['ci'][1]:.3f}]); categories {figures['categories']}",
            flush=True,
        )
        path = write_result(args.out or f"tool_calls_{args.task.stem}", {**record, "tool_choice": results}, started)
        print(f"wrote {path}", flush=True)

    try:
        loop.run(asyncio.to_thread(server.start))  # from the loop's executor: its thread outlives the server
        loop.run(measure(server, task, inputs, args, done))
    finally:
        server.stop()
        loop.close()


if __name__ == "__main__":
    main()
