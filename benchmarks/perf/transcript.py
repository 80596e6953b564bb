"""One held-out input's rollout before and after training, as Markdown: what the docs show of an agent task.

    python benchmarks/perf/transcript.py HOME             # the first held-out input of the run in HOME
    python benchmarks/perf/transcript.py HOME --input 3   # the fourth

HOME is a run's home (`learning.py --home`); the rollouts are its evaluation's (the `evaluate` artifact: the base
model's and the trained checkpoint's answers to the same held-out inputs), the first sample of each, with the
judge's score. Inputs are taken in the evaluation's order, never picked by score.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import _common  # noqa: F401  (puts the repository on sys.path, for autorl)

from autorl.trajectories import Trajectory, TrajectoryGroup


def render(trajectory: Trajectory) -> str:
    """The turns after the system prompt: the user's input, each assistant reply and tool call, each tool result."""
    lines = []
    for message in trajectory.messages()[1:]:
        role = message["role"]
        if message.get("content"):
            lines.append(f"{role}: {' '.join(str(message['content']).split())}")
        for call in message.get("tool_calls") or []:
            function = call["function"]
            lines.append(f"{role} calls {function['name']}({function['arguments']})")
    return "\n".join(lines)


def transcript(home: Path, index: int = 0) -> str:
    """The Markdown of held-out input `index`: the base model's rollout, then the trained one's."""
    evaluations = sorted(home.glob("artifacts/evaluate/*/groups.jsonl"))
    if len(evaluations) != 1:
        raise SystemExit(f"error: {home} holds {len(evaluations)} evaluations; give the home of one run")
    first: dict[str, dict[str, Trajectory]] = {}
    for line in evaluations[0].read_text().splitlines():
        for trajectory in TrajectoryGroup.model_validate_json(line).trajectories:
            meta = trajectory.metadata
            first.setdefault(meta["input"], {}).setdefault(meta["variant"], trajectory)
    inputs = list(first)
    if not 0 <= index < len(inputs):
        raise SystemExit(f"error: --input {index}: the evaluation has {len(inputs)} inputs (0 to {len(inputs) - 1})")
    parts = []
    for variant, trajectory in first[inputs[index]].items():
        parts.append(f"{variant} (score {trajectory.reward:.2f}):\n```\n{render(trajectory)}\n```")
    return "\n\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("home", type=Path, help="a run's home (learning.py --home)")
    parser.add_argument("--input", type=int, default=0, help="which held-out input, in the evaluation's order")
    options = parser.parse_args()
    print(transcript(options.home, options.input))


if __name__ == "__main__":
    main()
