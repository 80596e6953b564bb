"""Stage `system_prompt`: the policy's system prompt, chosen by the run's judge among candidates, or the
task's own `system_prompt` as written (no model call, no server).

The candidates: the task text itself; the prompt the generator writes from the task (unless it fails the
checks of `autorl.inputs.checks.system_prompt_problem`: the artifact then records why as `fallback`); and
the task text followed by up to `MAX_EXAMPLES` worked examples bootstrapped from the policy itself — its
answers (`group_size` each) to `BOOTSTRAP_INPUTS` training inputs, judged, the best answer of each input
kept where it scored above 0, best first (DSPy's BootstrapFewShot idea, with the run's judge as the metric;
a validation input never becomes an example).

Each candidate is then scored on `system_prompt_check` other training inputs (`eval_samples` answers under
each candidate, each input's answers judged together with the system prompt left out, so the judge sees the
answers alone), and a candidate replaces the task text only where the 95% bootstrap interval of its paired
per-input gain over the task text lies above 0 (the best such gain wins; the task text wins ties). A
program judge counts as reliable (it checks what an answer says, the same way each time); a model judge is
audited (`ruler.audit_judge`) on the bootstrap's groups (on the comparison's when there are none), and
where its verdict is not reliable, or the check is off, the task text is the system prompt and the artifact
says why: nothing trains under a prompt nobody checked. The report lists the candidates and their scores.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from typing import TYPE_CHECKING, Any

from autorl.inputs.generation import WrittenSystemPrompt, generate_system_prompt
from autorl.progress import waiting
from autorl.task import TaskSpec
from autorl.trajectories import Trajectory, TrajectoryGroup
from ruler.audit import reads_rubric

from ..records import inputs
from ..records.system_prompt import EXAMPLES, FILE, GENERATED, NAME, TASK, check_line
from ..stats import mean_ci
from ..steps.groups import judge_audit, unreliable

if TYPE_CHECKING:  # for annotations only: this stage's key does not cover the trainer's code
    from ..config import RunConfig
    from ..stage_context import StageContext

UPSTREAM: tuple[str, ...] = ("inputs",)  # the check answers training inputs
BOOTSTRAP_INPUTS = 6
"""Training inputs (after the check's own) whose judged base answers may become worked examples."""
MAX_EXAMPLES = 3
"""Most worked examples a candidate shows."""
MAX_EXAMPLE_CHARS = 400
"""An answer longer than this is not shown as an example (the prompt stays short)."""


def settings(task: TaskSpec, config: RunConfig) -> dict[str, Any]:
    if task.system_prompt is not None:
        return {"given": task.system_prompt}
    if not config.system_prompt_check:
        return {"description": task.description, "check": {}}  # the task text, nothing generated
    check = {  # what the candidates' answers and scores depend on
        "inputs": config.system_prompt_check, "answers": config.eval_samples, "model": config.model,
        "bootstrap": [BOOTSTRAP_INPUTS, config.group_size], **config.judging(), "rubric": task.rubric,
        "rollout": config.rollout.model_dump(), **task.agent_settings(),
    }  # fmt: skip
    return {"description": task.description, "generator": config.generator, "seed": config.seed, "check": check}


def is_done(ctx: StageContext) -> bool:
    return ctx.has_artifact(NAME)


async def run(ctx: StageContext) -> dict[str, Any]:
    task, config = ctx.task, ctx.config
    if task.system_prompt is not None:
        written, check = WrittenSystemPrompt(task.system_prompt, None), None
    elif not config.system_prompt_check:
        written = WrittenSystemPrompt(task.description, None)
        check = {"checked": False, "why": "the check is off (--system-prompt-check 0)", "kept": TASK}
        check["prompts"] = {TASK: task.description}
    else:
        if config.generator == "embedded":
            await ctx.policy.start()
        with waiting(f"writing the system prompt with {config.generator}"):
            written = await asyncio.to_thread(generate_system_prompt, task, config.generator, config.seed)
        if written.fallback:
            ctx.console.print(f"system_prompt: generated prompt unusable ({written.fallback}); it is no candidate")
        check = await choose(ctx, None if written.fallback else written.text)
    calls = len(written.calls)
    ctx.calls["generator"] += calls
    ctx.generator_calls += written.calls
    text = written.text if check is None else check["prompts"][check["kept"]]
    if check is not None:
        ctx.console.print(f"system_prompt: {check_line(check)}", highlight=False)
    with ctx.store.write(NAME, ctx.keys[NAME], {}) as out:
        (out / FILE).write_text(json.dumps({"system_prompt": text, "fallback": written.fallback, "check": check}))
    summary_check = None if check is None else {k: v for k, v in check.items() if k != "prompts"}
    return {"chars": len(text), "generator_calls": calls, "fallback": written.fallback, "check": summary_check}


async def choose(ctx: StageContext, generated: str | None) -> dict[str, Any]:
    """The system prompt chosen among the candidates (the module's docstring says how): `prompts` (each
    candidate's text), `kept` (a key of it), `checked`, and either each candidate's `scores`, `gains` over the
    task text with their interval and the `examples` shown, or `why` it was not checked."""
    config, description = ctx.config, ctx.task.description
    prompts = {TASK: description} | ({GENERATED: generated} if generated else {})
    unchecked = {"checked": False, "kept": TASK, "prompts": prompts}
    train_inputs = inputs.load(ctx, "train")
    scored_on = train_inputs[: config.system_prompt_check]
    pool = [] if ctx.task.has_tools() else train_inputs[len(scored_on) : len(scored_on) + BOOTSTRAP_INPUTS]
    await ctx.policy.start()
    sampled = await _judged(ctx, prompts, [[TASK] * config.group_size] * len(pool), pool, "worked examples")
    audit = await judge_audit(ctx, sampled) if sampled and reads_rubric(ctx.judge) else None
    if why := unreliable(audit):
        return unchecked | {"why": why, "audit": audit}
    examples = worked_examples(sampled)
    if examples:
        prompts[EXAMPLES] = with_examples(description, examples)
    if len(prompts) == 1:
        return unchecked | {"why": "no candidate besides the task text (the generated prompt was unusable, and no "
                            f"base answer to {len(pool)} training inputs scored above 0)"}  # fmt: skip
    names = [name for name in prompts for _ in range(config.eval_samples)]
    judged = await _judged(ctx, prompts, [names] * len(scored_on), scored_on, "system prompt check")
    if not sampled and reads_rubric(ctx.judge):
        audit = await judge_audit(ctx, judged)
        if why := unreliable(audit):
            return unchecked | {"why": why, "audit": audit}
    rewards = [  # per input scored, each candidate's rewards
        {n: [t.reward for t in g.trajectories if t.metadata["system_prompt"] == n] for n in prompts} for g in judged
    ]
    rewards = [by_prompt for by_prompt in rewards if all(by_prompt.values())]
    if len(rewards) < 2:
        return unchecked | {"why": "the judge scored too few of the answers"}
    scores = {n: round(statistics.fmean(r for by_prompt in rewards for r in by_prompt[n]), 4) for n in prompts}
    gains = {}
    for name in [n for n in prompts if n != TASK]:
        gain, low, high = mean_ci([statistics.fmean(r[name]) - statistics.fmean(r[TASK]) for r in rewards])
        gains[name] = [round(gain, 4), round(low, 4), round(high, 4)]
    better = [name for name, (_, low, _) in gains.items() if low > 0]
    return {
        "checked": True, "inputs": len(rewards), "judge": "reliable" if reads_rubric(ctx.judge) else "program",
        "scores": scores, "gains": gains, "examples": len(examples),
        "kept": max(better, key=lambda name: gains[name][0]) if better else TASK, "prompts": prompts,
    }  # fmt: skip


async def _judged(
    ctx: StageContext, prompts: dict[str, str], names: list[list[str]], texts: list[str], desc: str
) -> list[TrajectoryGroup]:
    """One judged group per text of `texts`: an answer under the prompt of each name in its list of `names`
    (the name in `metadata["system_prompt"]`), judged without its system prompt; the groups scored."""

    async def answer(name: str, text: str) -> Trajectory:
        trajectory = await ctx.policy.answer(prompts[name], text, ctx.config)
        trajectory.metadata["system_prompt"] = name
        items = trajectory.messages_and_choices
        if items and isinstance(items[0], dict) and items[0].get("role") == "system":  # judged on the answers
            trajectory.messages_and_choices = items[1:]
        return trajectory

    groups = [TrajectoryGroup(answer(n, t) for n in group) for group, t in zip(names, texts, strict=True)]
    return [g for g in await ctx.gather_judged(groups, desc) if g.trajectories]


def worked_examples(groups: list[TrajectoryGroup]) -> list[tuple[str, str]]:
    """Up to `MAX_EXAMPLES` (input, answer) pairs from judged groups of answers: each group's best answer of
    those that scored above 0 and are short enough to show, best first (earlier groups first on a tie). Not
    only successes: where the base model rarely succeeds, its best partial answers are what it has to show,
    and the comparison keeps the candidate only where the judge finds it better than the task text."""
    best = []
    for group in groups:
        shown = []
        for trajectory in group.trajectories:
            messages = trajectory.messages()
            question = next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")
            last = messages[-1] if messages else {}
            reply = str(last.get("content") or "").strip() if last.get("role") == "assistant" else ""
            if trajectory.reward > 0 and reply and len(reply) <= MAX_EXAMPLE_CHARS:
                shown.append((trajectory.reward, question, reply))
        if shown:
            best.append(max(shown, key=lambda item: item[0]))
    best.sort(key=lambda item: -item[0])
    return [(question, reply) for _, question, reply in best[:MAX_EXAMPLES]]


def with_examples(description: str, examples: list[tuple[str, str]]) -> str:
    """The task text followed by worked examples."""
    shown = "\n\n".join(f"Example input: {question}\nExample answer: {reply}" for question, reply in examples)
    return f"{description}\n\n{shown}"
