"""Which training inputs a step draws and how it spends its rollouts, so that each step has groups that differ
in score.

A step draws the next `groups_per_step` inputs in turn. When fewer than `groups_per_step` of their judged
groups differ in score beyond the judge's noise (a tie teaches GRPO nothing), the step spends more of its rollout
budget, `RunConfig.dynamic_sampling` x `groups_per_step` groups' worth of answers in all, where a difference is
likeliest (`pipelines.steps.groups.sampled_groups`): more answers to a tied input, judged with its earlier ones
(a tie search, `RunConfig.tie_search` rounds at most: an input tied at half credit is one the policy half
solves, and a few more samples often hold the answer that is right or wrong in full; Reinforce-Ada's adaptive
sampling), then new inputs (DAPO's dynamic sampling). An input whose group still tied `SET_ASIDE_AFTER` draws in
a row is set aside for `REVISIT_AFTER` steps, then drawn again (the policy may have changed); when too few others
are left, set-aside ones are drawn too, soonest due first (all of them in turn when every input is set aside). An
input whose answers all reached the top score is done: it is not drawn again while others are left.

What each step drew is written to its directory (`SAMPLING_FILE`), and the queue of a later step is rebuilt
from those records alone, so a resumed run draws what the killed one would have.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autorl.training.checkpoints import checkpoint_name

SAMPLING_FILE = "sampling.json"
"""A step's draws, in its directory under `steps/`: `drawn` (the inputs, in order), `tied` (those whose group
tied), `answers` (all it sampled), `searched` (per input, the search rounds it took), `set_aside` (the inputs set
aside after this step) and `done` (those whose answers all reached the top score)."""
SET_ASIDE_AFTER = 2
"""Draws in a row whose group tied before an input is set aside."""
REVISIT_AFTER = 5
"""Steps an input stays set aside."""


@dataclass
class InputQueue:
    """The training inputs in turn, less those set aside; `step` counts RL steps from 1."""

    inputs: list[str]
    drawn: int = 0
    """Draws so far: where the next one starts in the cycle of `inputs`."""
    streaks: dict[str, int] = field(default_factory=dict)
    """Per input, the draws in a row whose group tied."""
    aside_until: dict[str, int] = field(default_factory=dict)
    """Per input set aside, the first step that may draw it again."""
    done: set[str] = field(default_factory=set)
    """The inputs whose answers all reached the top score: drawn only when no other is left."""

    def draw(self, count: int, step: int, taken: frozenset[str] | set[str] = frozenset()) -> list[str]:
        """The next `count` inputs that step `step` may draw: in turn, not set aside (unless all are), none of
        `taken` (those the step drew already) and none twice; when too few are left, set-aside ones, soonest due
        first (a step is not cut short while inputs remain); fewer only when every input is drawn. Done inputs are
        drawn only when every input is done."""
        playing = {text for text in self.inputs if text not in self.done} or set(self.inputs)
        eligible = {text for text in playing if self.aside_until.get(text, 0) <= step} or playing
        in_turn = [self.inputs[(self.drawn + n) % len(self.inputs)] for n in range(len(self.inputs))]
        chosen: list[str] = []
        scanned = 0
        while len(chosen) < count and scanned < len(self.inputs):
            text = in_turn[scanned]
            scanned += 1
            if text in eligible and text not in taken and text not in chosen:
                chosen.append(text)
        self.drawn += scanned
        aside = sorted(  # stable: in turn among those due at the same step
            (t for t in in_turn if t in playing and t not in eligible and t not in taken and t not in chosen),
            key=lambda text: self.aside_until[text],
        )
        return chosen + aside[: count - len(chosen)]

    def record(
        self, step: int, drawn: list[str], tied_inputs: set[str], done: set[str] | frozenset[str] = frozenset()
    ) -> list[str]:
        """Count step `step`'s draws: the streaks of ties, the inputs `done`, and the inputs set aside now
        (returned; a done input is not set aside, it leaves play)."""
        self.done |= set(done)
        aside = []
        for text in drawn:
            self.streaks[text] = self.streaks.get(text, 0) + 1 if text in tied_inputs else 0
            if self.streaks[text] >= SET_ASIDE_AFTER and text not in self.done:
                self.aside_until[text], self.streaks[text] = step + 1 + REVISIT_AFTER, 0
                aside.append(text)
        return aside

    @classmethod
    def rebuilt(cls, inputs: list[str], steps_dir: Path, first: int, step: int, groups_per_step: int) -> InputQueue:
        """The queue before step `step` (a model step; RL's first is `first`), from the records of the RL
        steps before it in `steps_dir`. A step without one (trained before dynamic sampling) drew the next
        `groups_per_step` inputs and counts no tie."""
        queue = cls(inputs)
        for model_step in range(first, step):
            path = steps_dir / checkpoint_name(model_step) / SAMPLING_FILE
            if not path.is_file():
                queue.drawn += groups_per_step
                continue
            record = json.loads(path.read_text())
            queue.drawn = record["cursor"]
            queue.record(model_step - first + 1, record["drawn"], set(record["tied"]), set(record.get("done", [])))
        return queue


def step_record(
    queue: InputQueue,
    drawn: list[str],
    tied_inputs: set[str],
    answers: int,
    aside: list[str],
    searched: dict[str, int] | None = None,
    done: set[str] | None = None,
) -> dict[str, Any]:
    """What `SAMPLING_FILE` holds for a step (`cursor`: the queue's position after it)."""
    return {
        "drawn": drawn,
        "tied": sorted(tied_inputs),
        "answers": answers,
        "searched": searched or {},
        "set_aside": aside,
        "done": sorted(done or ()),
        "cursor": queue.drawn,
    }


def step_draws(steps_dir: Path, step: int) -> str:
    """A step's draws for the report: "4" inputs drawn, "4, 2 searched", "4, 2 set aside"; "-" for a step without
    a record."""
    path = steps_dir / checkpoint_name(step) / SAMPLING_FILE
    if not path.is_file():
        return "-"
    record = json.loads(path.read_text())
    said = [f"{len(record['drawn'])}"]
    said += [f"{len(record[key])} {words}" for key, words in REPORTED.items() if record.get(key)]
    return ", ".join(said)


REPORTED = {"searched": "searched", "set_aside": "set aside", "done": "done"}
"""What the report's training table counts of a step's draws besides the inputs drawn."""
