"""What the optimizer made of a variant's prompt (`OptimizedPrompt`, the cached artifact) and how the
benchmark reports it: its results.md section and the prompts file beside it. Apart from `optimize` so the
results read it without DSPy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from .variants import Cost

PROMPTS = "prompts.json"
"""The benchmark's file of the optimized prompts it used (`write_prompts`), beside results.md."""


class OptimizedPrompt(BaseModel):
    """What the optimizer made of a variant's prompt (the artifact), and what that took."""

    optimizer: str
    system_prompt: str
    """The system prompt the variant answers with."""
    demos: list[dict[str, Any]] = Field(default_factory=list)
    """Earlier turns shown before each input (bootstrap's demonstrations), as chat messages."""
    improved: bool
    """Whether a candidate scored higher than the original prompt; if not, the prompt is the original."""
    original_score: float
    """The original prompt's mean score on the selection inputs."""
    score: float
    """The kept prompt's mean score on the selection inputs."""
    best_score: float
    """The best candidate's mean score on the selection inputs (the kept prompt's, when it improved)."""
    selection_inputs: int
    candidates: int
    """Candidate prompts scored on the selection inputs, the original included."""
    calls: dict[str, int]
    """Model calls made, by kind: policy (the variant's answers), judge, reflection."""
    seconds: float
    spent: dict[str, Any] | None = None
    """What making it cost (`pipelines.records.pricing.priced`: its answers', judge's and reflection's tokens, its seconds
    at the `--price-per-hour` of the benchmark that made it); None in an artifact made before autorl priced it."""

    @property
    def cost(self) -> Cost:
        outcome = "tuned" if self.improved else "kept the original"
        usd = self.spent["usd"]["total"] if self.spent is not None else None
        return Cost(sum(self.calls.values()), self.seconds, f"{self.optimizer} ({outcome})", usd)

    def summary(self) -> str:
        """One line: what the optimizer found, on what, at what cost."""
        inputs = f"on {self.selection_inputs} train inputs"
        made = f"{self.candidates} candidates, {sum(self.calls.values())} model calls, {self.seconds:.0f} s"
        if not self.improved:
            return (
                f"{self.optimizer} found no prompt better than the original (best candidate {self.best_score:.3f}, "
                f"the original {self.original_score:.3f} {inputs}; {made}): it answers with the original"
            )
        what = f"{len(demos_of(self.demos))} demonstrations" if self.demos else "new instructions"
        return f"{self.optimizer} kept {what}: {self.score:.3f} vs the original's {self.original_score:.3f} {inputs} ({made})"


def demos_of(turns: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Earlier turns split into demonstrations, each starting at a user message."""
    demos: list[list[dict[str, Any]]] = []
    for message in turns:
        if message.get("role") == "user" or not demos:
            demos.append([])
        demos[-1].append(message)
    return demos


def markdown(label: str, result: OptimizedPrompt, path: Path) -> str:
    """The results.md section of an optimized variant: the outcome, the prompt and demonstrations."""
    lines = [f"### {label}", "", result.summary() + f". Artifact: `{path}`.", "", "System prompt:", ""]
    lines += _quoted(result.system_prompt)
    for number, demo in enumerate(demos_of(result.demos), 1):
        lines += ["", f"Demonstration {number} (earlier turns before each input):", ""]
        for message in demo:
            lines += _quoted(f"{message['role']}: {message.get('content') or ''}")
    return "\n".join(lines)


def write_prompts(path: Path, tuned: dict[str, tuple[OptimizedPrompt, Path]]) -> None:
    """Each optimized variant's prompt (`OptimizedPrompt`) and its artifact file, by label, as JSON."""
    records = {label: {"artifact": str(file), **result.model_dump()} for label, (result, file) in tuned.items()}
    path.write_text(json.dumps(records, indent=2) + "\n", encoding="utf-8")


def _quoted(text: str) -> list[str]:
    return ["> " + line if line else ">" for line in text.splitlines() or [""]]
