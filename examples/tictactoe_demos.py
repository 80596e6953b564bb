"""Worked tic-tac-toe games for an SFT warm-up of `tictactoe.toml` (`--sft-file examples/tictactoe_sft.jsonl`).

The embedded 135M model almost never writes a complete tool call on its own, so RL alone has nothing to learn
from on this task (docs/learning.md). Worked games teach it the form of a call; which cell wins is left to RL.
Each game is on a board that is in neither split of `tictactoe.jsonl`, and its move is a winning cell found
by the same rules the judge replays, answered by the real `play` tool.

    python examples/tictactoe_demos.py [--games 24] [--seed 0] [--out examples/tictactoe_sft.jsonl]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from collections.abc import Iterator
from pathlib import Path

from tictactoe import BOARD, play, show, winner, winning_cells

from autorl.agents.tools import Toolbox
from autorl.task import load_task

HERE = Path(__file__).resolve().parent
TASK = HERE / "tictactoe.toml"
QUESTION = (
    "Tic-tac-toe: you are X and it is your move. Board: {board}\n{rows}\n"
    "Cells are numbered 1 to 9, row by row from the top left. Call play with the board and your cell."
)
"""How `tictactoe.jsonl` states a game (the judge reads the board from `Board: ...`)."""


def boards(rng: random.Random, taken: set[str]) -> Iterator[str]:
    """Positions with X to move where X can win at once and O threatens a line too, not in `taken`."""
    while True:
        moves = rng.choice((2, 3))  # X and O have each played this many
        cells = rng.sample(range(9), 2 * moves)
        board = ["."] * 9
        for n, cell in enumerate(cells):
            board[cell] = "X" if n % 2 == 0 else "O"
        text = "".join(board)
        if text in taken or winner(text) or not winning_cells(text, "X") or not winning_cells(text, "O"):
            continue
        taken.add(text)
        yield text


def game(board: str, system_prompt: str, tools: list[dict]) -> dict:
    """One worked game: the question, a `play` call on a winning cell, the tool's answer, a closing line."""
    cell = winning_cells(board, "X")[0] + 1
    arguments = json.dumps({"board": board, "cell": cell})
    call = {"id": "call_1", "type": "function", "function": {"name": "play", "arguments": arguments}}
    return {
        "messages": [
            {"role": "system", "content": system_prompt},
            {"role": "user", "content": QUESTION.format(board=board, rows=show(board))},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": play(board, cell)},
            {"role": "assistant", "content": f"I played {cell} and won."},
        ],
        "tools": tools,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=HERE / "tictactoe_sft.jsonl")
    args = parser.parse_args()
    task = load_task(TASK)
    toolbox = await Toolbox.open(task)
    try:
        tools = toolbox.openai_tools()
    finally:
        await toolbox.aclose()
    inputs = [json.loads(line)["input"] for line in (HERE / "tictactoe.jsonl").read_text().splitlines()]
    taken = {BOARD.search(text).group(1) for text in inputs}
    found = boards(random.Random(args.seed), taken)
    lines = [json.dumps(game(next(found), task.system_prompt, tools)) for _ in range(args.games)]
    args.out.write_text("".join(line + "\n" for line in lines))
    print(f"wrote {args.games} worked games to {args.out}")


if __name__ == "__main__":
    asyncio.run(main())
