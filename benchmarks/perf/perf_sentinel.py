"""What the reward-hacking sentinel costs a GRPO update: the trainer's step with its figures against without.

The sentinel's figures (`autorl.training.drift`) score every rollout of a step under the base weights (the
LoRA switched off, no gradient) before the update: one forward per rollout, tied groups included. "with" is
a step that measures them (`TrainerConfig.drift_every` 1: every step), "without" one that does not
(`drift_every` 0), which is what every step between two measured ones is under the default (every 3rd step
measures them when `kl_beta` is 0, the default: on average a third of the difference per step). With
`kl_beta` > 0 the pass is the KL penalty's reference, which every step computes anyway, so there the
figures are free.

Both trainers: the embedded SmolLM2-135M, the run's LoRA and `TrainConfig` defaults (grpo, micro-batch 8,
prompt sharing), 2 groups x 8 rollouts of a learning-benchmark prompt (a system prompt and a question,
~60 tokens) and 64 sampled tokens each, random token ids with random logprobs and rewards (the cost of a
forward does not depend on which tokens). Two cases: every group carries signal, and one of the two tied
(trained on nothing, scored by the sentinel all the same). They alternate step by step, the first pair is
a warm-up; medians of the rest.

    python benchmarks/perf/perf_sentinel.py [--repeats 6]   # writes benchmarks/perf/results/sentinel.json
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, ratio_entry, summary, write_result
from openai.types.chat.chat_completion import Choice

from autorl import TrainConfig, TrainerConfig, Trajectory, TrajectoryGroup
from autorl.serving.embedded import DEFAULT_BASE_MODEL, resolve_base_model
from autorl.training.sequences import TOKEN_ID_PREFIX
from autorl.training.trainer import GRPOTrainer

GROUPS, GROUP_SIZE, COMPLETION_TOKENS = 2, 8, 64
SYSTEM = "Answer the user's question in one short sentence written entirely in CAPITAL LETTERS."
QUESTIONS = ("Why is the sky blue?", "How do bees make honey?")


def sampled_choice(rng: random.Random, vocabulary: int) -> Choice:
    """A `Choice` as our vLLM server returns it: `COMPLETION_TOKENS` sampled ids as `token_id:N`, with logprobs."""
    content = [
        {"token": f"{TOKEN_ID_PREFIX}{rng.randrange(vocabulary)}", "logprob": -rng.uniform(0.1, 4), "top_logprobs": []}
        for _ in range(COMPLETION_TOKENS)
    ]
    message = {"role": "assistant", "content": "x"}
    return Choice.model_validate(
        {"index": 0, "finish_reason": "stop", "message": message, "logprobs": {"content": content}}
    )


def groups(rng: random.Random, vocabulary: int, tied: int) -> list[TrajectoryGroup]:
    """`GROUPS` groups of `GROUP_SIZE` rollouts; the last `tied` groups' rewards all equal."""
    result = []
    for number, question in enumerate(QUESTIONS[:GROUPS]):
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
        tie = number >= GROUPS - tied
        result.append(
            TrajectoryGroup(
                Trajectory(
                    messages_and_choices=[*messages, sampled_choice(rng, vocabulary)],
                    reward=0.0 if tie else rng.random(),
                )
                for _ in range(GROUP_SIZE)
            )
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=6, help="Measured step pairs per case (after a warm-up).")
    args = parser.parse_args()
    started = time.monotonic()
    model_dir = resolve_base_model(DEFAULT_BASE_MODEL)
    config = TrainConfig(learning_rate=1e-5)
    rng = random.Random(0)
    results, rows = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {
            "with": GRPOTrainer(model_dir, Path(tmp) / "a", TrainerConfig(drift_every=1)),
            "without": GRPOTrainer(model_dir, Path(tmp) / "b", TrainerConfig(drift_every=0)),
        }
        vocabulary = len(trainers["with"].tokenizer) - 200  # clear of the special tokens at the end
        for case, tied in (("all groups trained", 0), ("one group of two tied", 1)):
            times: dict[str, list[float]] = {"with": [], "without": []}
            for repeat in range(args.repeats + 1):
                data = groups(rng, vocabulary, tied)
                for name in ("with", "without") if repeat % 2 else ("without", "with"):
                    metrics = trainers[name].step(data, config)
                    if repeat:  # the first pair warms up
                        times[name].append(metrics["step_time_s"])
            results[case] = {name: summary(values) for name, values in times.items()}
            conditions = (
                f"{GROUPS} groups x {GROUP_SIZE} rollouts of {COMPLETION_TOKENS} tokens, {case}; "
                f"TrainConfig defaults (kl_beta 0), dtype {trainers['with'].dtype}; medians of {args.repeats}"
            )
            with_s, without_s = results[case]["with"]["median"], results[case]["without"]["median"]
            rows.append(ratio_entry(f"GRPO update, {case}: without / with the sentinel", with_s, without_s, "s",
                                    None, False, conditions))  # fmt: skip
            print(f"{case}: with {with_s:.2f} s, without {without_s:.2f} s: +{with_s / without_s - 1:.1%}", flush=True)
    print_table(rows)
    command = ["python", "benchmarks/perf/perf_sentinel.py", *sys.argv[1:]]
    path = write_result("sentinel", {"command": command, "ratios": rows, "cases": results}, started)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
