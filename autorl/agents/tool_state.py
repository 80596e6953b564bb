"""Per-rollout memory for a task's function tools: a game's board, a cart, a file the agent edits.

A `[[tools]]` function is one Python function for the whole run, called by every rollout at once; what a tool
must remember between the calls of one rollout cannot live in the function. A function that declares a parameter
annotated `RolloutState` gets, at every call of one rollout, the same `RolloutState`: a dict that starts empty,
with `input` the rollout's user input, and a fresh one for the next rollout (a chat's conversation is one
rollout, until `/reset`). That parameter is not part of the tool's JSON schema: the model never sees or fills
it. ART keeps such state in the user's rollout function (its tic-tac-toe holds the board there); a task file
has no rollout function, so the tool holds it.

    from autorl import RolloutState

    def play(cell: int, game: RolloutState) -> str:
        board = game.setdefault("board", board_in(game.input))
        ...
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any


class RolloutState(dict):
    """One rollout's memory for its function tools (a dict, empty at the start), and its user input."""

    def __init__(self, input: str = "") -> None:
        super().__init__()
        self.input = input
        """The rollout's user input (the task input the agent answers)."""


def is_state(hint: Any) -> bool:
    """Whether a parameter's type hint is `RolloutState`, also inside `Annotated[...]`, or, where hints could not
    be resolved (a name only imported under TYPE_CHECKING), its annotation string names it (`RolloutState`,
    `autorl.RolloutState`)."""
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    if isinstance(hint, str):
        return hint.replace(" ", "").rsplit(".", 1)[-1] == "RolloutState"
    return hint is RolloutState


def state_parameter(function: Callable[..., Any]) -> str | None:
    """The name of `function`'s parameter annotated `RolloutState`, or None. Raises TypeError for two."""
    try:
        hints = typing.get_type_hints(function if inspect.isroutine(function) else type(function).__call__)
    except Exception:
        hints = {}
    names = [
        parameter.name
        for parameter in inspect.signature(function).parameters.values()
        if is_state(hints.get(parameter.name, parameter.annotation))
    ]
    if len(names) > 1:
        raise TypeError(f"parameters {', '.join(map(repr, names))} are all RolloutState; a tool takes one")
    return names[0] if names else None
