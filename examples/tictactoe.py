"""Tic-tac-toe against a program opponent: the `play` tool of `tictactoe.toml` and its judge `score`.

The agent plays X. Each input shows a board where X is to move and can win at once; the agent calls
`play(board, cell)` with the board as a 9-character string (rows top to bottom, `.` for an empty cell) and a
cell 1-9; the tool plays X there, answers with the opponent's move and the new board, and the agent moves
again (the task's `max_turns`). The opponent wins when it can, else blocks X's win, else takes the centre,
a corner, an edge, the first free one.

`play_cell(cell)` is the same tool without the board argument: it keeps the game's board itself, per rollout
(`autorl.RolloutState`), from the board the input states (`tictactoe_cell.toml` in the learning benchmark); an
illegal move ends its game, as the judge's replay ends there.

The judge replays the game from the input's board with the agent's moves (its `play` calls in order, a call
the tool rejected counting as an illegal move; a cell named in prose is no move), whatever boards the agent
passed to the tool, so a wrong board in a call cannot make a win: a win scores 1, a draw 0.5, else 0.2 for each
legal move the agent made before the game ended or an illegal move stopped it (at most 0.4). `score_result`
scores the result alone (a win 1, a draw 0.5, else 0), which a policy naming one cell on every board cannot
earn without reading the board.
"""

from __future__ import annotations

import json
import re
from typing import Any

from autorl import RolloutState

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
PREFERENCE = (4, 0, 2, 6, 8, 1, 3, 5, 7)
"""The opponent's order of cells (0-based) when it has no win and nothing to block: centre, corners, edges."""
BOARD = re.compile(r"board:\s*([XO.]{9})(?![XO.])", re.IGNORECASE)
"""How an input states the starting board (`board: XO..X.O..`: nine cells, then no tenth; a board may end in
`.`, after which a word boundary does not hold)."""
WIN, DRAW, PER_LEGAL_MOVE, MOST_FOR_MOVES = 1.0, 0.5, 0.2, 0.4


def winner(board: str) -> str | None:
    """ "X" or "O" when that player holds a line, else None."""
    for a, b, c in LINES:
        if board[a] != "." and board[a] == board[b] == board[c]:
            return board[a]
    return None


def winning_cells(board: str, player: str) -> list[int]:
    """The empty cells (0-based) where `player` would complete a line."""
    return [i for i in range(9) if board[i] == "." and winner(board[:i] + player + board[i + 1 :]) == player]


def opponent_cell(board: str) -> int:
    """The opponent's (O's) move on `board`, which has an empty cell: win, else block X, else by `PREFERENCE`."""
    for player in ("O", "X"):
        if cells := winning_cells(board, player):
            return cells[0]
    return next(i for i in PREFERENCE if board[i] == ".")


def place(board: str, index: int, player: str) -> str:
    return board[:index] + player + board[index + 1 :]


def show(board: str) -> str:
    """The board as three rows of cells (`X|O|.`)."""
    return "\n".join("|".join(board[row : row + 3]) for row in (0, 3, 6))


def play(board: str, cell: int) -> str:
    """Play X at a cell of a tic-tac-toe board; the opponent (O) answers.

    Args:
        board: The board before your move: 9 characters X, O or . (empty), row by row from the top left.
        cell: The cell you play, 1 to 9, row by row from the top left.
    """
    board = board.strip().upper()
    if len(board) != 9 or set(board) - set("XO."):
        return f"error: the board must be 9 characters X, O or ., row by row; got {board!r}"
    return take_cell(board, cell)[0]


def play_cell(cell: int, game: RolloutState) -> str:
    """Play X at a cell of the game's board; the opponent (O) answers.

    Args:
        cell: The cell you play, 1 to 9, row by row from the top left.
    """
    if "board" not in game:  # the rollout's first move: the board its input states
        start = BOARD.search(game.input)
        if start is None:
            return "error: this game has no board (the input states none)"
        game["board"], game["over"] = start.group(1).upper(), False
    if game["over"]:
        return "error: the game is over"
    text, game["board"], game["over"] = take_cell(game["board"], cell)
    if text.startswith("error:"):  # the judge's replay stops at an illegal move: so does the game
        game["over"] = True
        text += "; an illegal move ends the game"
    return text


def take_cell(board: str, cell: int) -> tuple[str, str, bool]:
    """X plays `cell` on `board` and O answers: what the tool says, the board after, and whether the game
    ended (an illegal cell leaves the board as it was)."""
    if not 1 <= cell <= 9 or board[cell - 1] != ".":
        return f"error: cell {cell} is not an empty cell of the board (cells 1-9, row by row)", board, False
    board = place(board, cell - 1, "X")
    if winner(board) == "X":
        return f"You played {cell} and won.\n{show(board)}", board, True
    if "." not in board:
        return f"You played {cell}: the game is a draw.\n{show(board)}", board, True
    reply = opponent_cell(board)
    board = place(board, reply, "O")
    if winner(board) == "O":
        return f"You played {cell}; O played {reply + 1} and won.\n{show(board)}", board, True
    return f"You played {cell}; O played {reply + 1}. Board: {board}\n{show(board)}\nYour move.", board, False


def agent_cells(messages: list[dict[str, Any]]) -> list[int]:
    """The cells (1-9) the agent chose, in order: the `cell` of each `play` call (0, an illegal move, for a call
    the tool rejected or without a readable cell). A cell named in prose is no move: the task asks for calls
    of the tool, and "I play 1." would otherwise score a legal move on most boards."""
    rejected = {
        m.get("tool_call_id")
        for m in messages
        if m.get("role") == "tool" and str(m.get("content")).startswith("error:")
    }
    cells = []
    for message in messages:
        for call in message.get("tool_calls") or [] if message.get("role") == "assistant" else []:
            function = call.get("function") or {}
            if function.get("name") != "play":
                continue
            if call.get("id") in rejected:
                cells.append(0)
                continue
            try:
                cells.append(int(call_arguments(call).get("cell")))
            except (ValueError, TypeError):
                cells.append(0)  # a call without a readable cell is an illegal move
    return cells


def call_arguments(call: dict[str, Any]) -> dict[str, Any]:
    """A tool call's arguments (an OpenAI `tool_calls` entry) as a dict; {} when they are no JSON object."""
    arguments = (call.get("function") or {}).get("arguments")
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def score(messages: list[dict[str, Any]]) -> float:
    """The agent's game, replayed from the input's board: 1 for a win, 0.5 for a draw, else 0.2 per legal move
    made (at most 0.4); 0 when the input states no board."""
    outcome, legal = replay(messages)
    return {"win": WIN, "draw": DRAW}.get(outcome, min(MOST_FOR_MOVES, PER_LEGAL_MOVE * legal))


def score_result(messages: list[dict[str, Any]]) -> float:
    """The game's result alone: 1 for a win, 0.5 for a draw, else 0. No credit for a legal move that does not
    win: a policy that always names one cell makes legal moves on most boards without reading any, and under
    `score` that earns the 0.2 a move."""
    return {"win": WIN, "draw": DRAW}.get(replay(messages)[0], 0.0)


def replay(messages: list[dict[str, Any]]) -> tuple[str, int]:
    """The agent's game replayed from the input's board: how it ended ("win", "draw", else "lost" or "stopped":
    the opponent won, an illegal move, no more moves) and how many legal moves the agent made. "stopped" with 0
    moves when the input states no board."""
    start = next((BOARD.search(str(m.get("content") or "")) for m in messages if m.get("role") == "user"), None)
    if start is None:
        return "stopped", 0
    board, legal = start.group(1).upper(), 0
    for cell in agent_cells(messages):
        if not 1 <= cell <= 9 or board[cell - 1] != ".":
            break
        legal += 1
        board = place(board, cell - 1, "X")
        if winner(board) == "X":
            return "win", legal
        if "." not in board:
            return "draw", legal
        board = place(board, opponent_cell(board), "O")
        if winner(board) == "O":
            return "lost", legal
    return "stopped", legal
