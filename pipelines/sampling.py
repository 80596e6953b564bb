"""Dynamic sampling: which training inputs a step draws, so that each step has groups that differ in score.

A step draws the next `groups_per_step` inputs in turn. When fewer than `groups_per_step` of their judged
groups differ in score beyond the judge's noise (a tie teaches GRPO nothing), it draws more inputs, up to
`RunConfig.dynamic_sampling` x `groups_per_step` groups in all (DAPO's dynamic sampling; new inputs rather
than more answers to a tied one: a tie is evidence that the input is too easy or too hard for the policy
now, and a model judge's scores are relative to the group they were judged in, so two judgings of one input
do not pool). An input whose group tied `SET_ASIDE_AFTER` draws in a row is set aside for `REVISIT_AFTER`
steps, then drawn again (the policy may have changed); when too few others are left, set-aside ones are drawn
too, soonest due first (all of them in turn when every input is set aside).

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
tied), `answers`, and `set_aside` (the inputs set aside after this step)."""
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

    def draw(self, count: int, step: int, taken: frozenset[str] | set[str] = frozenset()) -> list[str]:
        """The next `count` inputs that step `step` may draw: in turn, not set aside (unless all are), none of
        `taken` (those the step drew already) and none twice; when too few are left, set-aside ones, soonest due
        first (a step is not cut short while inputs remain); fewer only when every input is drawn."""
        eligible = {text for text in self.inputs if self.aside_until.get(text, 0) <= step} or set(self.inputs)
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
            (text for text in in_turn if text not in eligible and text not in taken and text not in chosen),
            key=lambda text: self.aside_until[text],
        )
        return chosen + aside[: count - len(chosen)]

    def record(self, step: int, drawn: list[str], tied_inputs: set[str]) -> list[str]:
        """Count step `step`'s draws: the streaks of ties, and the inputs set aside now (returned)."""
        aside = []
        for text in drawn:
            self.streaks[text] = self.streaks.get(text, 0) + 1 if text in tied_inputs else 0
            if self.streaks[text] >= SET_ASIDE_AFTER:
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
            queue.record(model_step - first + 1, record["drawn"], set(record["tied"]))
        return queue


def step_record(
    queue: InputQueue, drawn: list[str], tied_inputs: set[str], answers: int, aside: list[str]
) -> dict[str, Any]:
    """What `SAMPLING_FILE` holds for a step (`cursor`: the queue's position after it)."""
    return {"drawn": drawn, "tied": sorted(tied_inputs), "answers": answers, "set_aside": aside, "cursor": queue.drawn}


def step_draws(steps_dir: Path, step: int) -> str:
    """A step's draws for the report: "4" inputs drawn, "4, 2 set aside"; "-" for a step without a record."""
    path = steps_dir / checkpoint_name(step) / SAMPLING_FILE
    if not path.is_file():
        return "-"
    record = json.loads(path.read_text())
    return f"{len(record['drawn'])}" + (f", {len(record['set_aside'])} set aside" if record["set_aside"] else "")
