"""The learning benchmark's judges (benchmarks/perf/learning_tasks/judges.py): the content tasks' (right, wrong
and partly right answers; the examples' judges and game among them), the tool-use task's and its task file."""

import json
from pathlib import Path

import learning
import pytest

from autorl.task import load_task
from benchmarks.perf.learning_tasks import judges
from benchmarks.perf.learning_tasks.judges import json_keys, tictactoe, tool_call
from examples.tictactoe import BOARD, opponent_cell, place, play, show, winner, winning_cells

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "benchmarks" / "perf" / "learning_tasks" / "tool_call.toml"
QUESTION = [{"role": "system", "content": "Convert units."}, {"role": "user", "content": "3 miles in km?"}]


def called(name: str, result: str) -> list[dict]:
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": '{"value": 3}'}}
    return [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": result},
        {"role": "assistant", "content": "That is 4.83 km."},
    ]


@pytest.mark.parametrize(
    "messages, score",
    [
        (called("convert", "3 mi = 4.82803 km"), 1.0),  # the tool accepted the call
        (called("convert", "error: invalid arguments for 'convert': 'from_unit' is a required property"), 0.5),
        (called("search", "error: unknown tool 'search'; available: convert"), 0.5),
        ([*QUESTION, {"role": "assistant", "content": '<tool_call>{"name": "convert"'}], 0.24),  # not parsed
        ([*QUESTION, {"role": "assistant", "content": '<tool_call>{"name": "convert", "arguments": {"value": 3'}], 0.4),
        ([*QUESTION, {"role": "assistant", "content": 'Use {"name": "converter", "arguments": {}}'}], 0.16),
        ([*QUESTION, {"role": "assistant", "content": "3 miles is about 4.8 km."}], 0.0),
        (QUESTION, 0.0),
    ],
)
def test_tool_call_scores_the_use_of_the_tools(messages, score):
    assert tool_call(messages) == score


def test_the_tool_task_loads_its_tool_and_inputs():
    task = load_task(str(TASK))
    assert [tool.name for tool in task.tools] == ["convert"] and task.max_turns == 2
    rows = (TASK.parent / task.inputs_file).read_text().splitlines()
    assert len(rows) == 40 and sum('"split": "val"' in row for row in rows) == 12


@pytest.mark.parametrize(
    "answer, score",
    [
        ('{"a": 1, "b": 2}', 1.0),
        ('{"a": 1}', 0.0),
        ('{"a": 1, "b": 2, "c": 3}', 0.0),
        ("[1, 2]", 0.0),
        ("a and b", 0.0),
    ],
)
def test_json_keys_is_all_or_nothing(answer, score):
    assert json_keys([*QUESTION, {"role": "assistant", "content": answer}]) == score


def asked(question: str, reply: str) -> list[dict]:
    return [
        {"role": "system", "content": "Answer."},
        {"role": "user", "content": question},
        {"role": "assistant", "content": reply},
    ]


@pytest.mark.parametrize(
    "reply, score",
    [
        ("12 + 7 = 19", 1.0),  # right
        ("19", 1.0),
        ("12 + 7 = 20", 0.5),  # one off: partial credit
        ("12 + 7 = 24", round(0.5 * (1 - 4 / 9), 4)),
        ("12 + 7 = 40", 0.0),  # far off
        ("The sum is nineteen.", 0.0),  # no number
        ("12 + 7 is 19? No, it is 21", round(0.5 * (1 - 1 / 9), 4)),  # the last number counts
        ("20", 0.0),  # close, but about no numbers of the question: a constant answer would earn it everywhere
        ("7 + 7 = 20", 0.0),
    ],
)
def test_arithmetic_checks_the_sum(reply, score):
    assert judges.arithmetic(asked("What is 12 + 7?", reply)) == score


@pytest.mark.parametrize("judge", ["arithmetic", "arithmetic_strict"])
def test_a_constant_number_earns_only_the_sums_it_is(judge):
    """Every constant number alone, over the held-out questions, scores the share of them whose sum it is, and
    nothing for the sums it is near."""
    rows = [json.loads(line) for line in (ROOT / "examples/arithmetic.jsonl").open()]
    questions = [row["input"] for row in rows if row["split"] == "val"]
    sums = [int(a) + int(b) for a, b in (judges.SUM.search(q).groups() for q in questions)]
    for number in range(50):
        scores = [getattr(judges, judge)(asked(q, str(number))) for q in questions]
        assert sum(scores) / len(scores) == sums.count(number) / len(sums)


def test_arithmetic_needs_a_sum_to_check():
    assert judges.arithmetic(asked("What is the capital of Peru?", "19")) == 0.0


@pytest.mark.parametrize(
    "reply, score",
    [
        ("Lima", 1.0),
        ("The capital of Peru is Lima.", 1.0),
        ("Lima is the capital of Peru, a country in South America with a long history of Inca rule and more.", 0.7),
        ("Lima or maybe Santiago or Quito", 0.1),  # a list of guesses that holds the right one
        ("Cusco", 0.0),
        ("Peru", 0.0),
        ("Limassol", 0.0),  # a whole word only
    ],
)
def test_capitals_checks_the_city(reply, score):
    assert judges.capitals(asked("What is the capital of Peru?", reply)) == score


def test_capitals_accepts_other_spellings_and_knows_only_its_table():
    assert judges.capitals(asked("What is the capital of India?", "Delhi")) == 1.0
    assert judges.capitals(asked("What is the capital of Atlantis?", "Poseidonia")) == 0.0


@pytest.mark.parametrize(
    "reply, score",
    [("Cold.", 1.0), ("cold", 1.0), ("The opposite of hot is cold.", 0.5), ("Warm", 0.0), ("hot", 0.0), ("", 0.0)],
)
def test_opposites_checks_the_word(reply, score):
    assert judges.opposites(asked('What is the opposite of "hot"?', reply)) == score


@pytest.mark.parametrize(
    "reply, score",
    [
        ("apple, fig, pear", 1.0),
        ("Apple\nFig\nPear", 1.0),  # separated by anything
        ("apple, pear, fig", round(0.5 / 3, 4)),  # one position right
        ("pear, apple, fig", 0.0),  # the question's order: nothing right here
        ("Sure! apple, fig, pear", round(0.5 * 3 / 3, 4)),  # right order with words beside it
        ("apple, fig", round(0.5 * 2 / 3, 4)),  # one word missing
        ("banana", 0.0),
    ],
)
def test_alphabetical_checks_the_order(reply, score):
    assert judges.alphabetical(asked("Put these words in alphabetical order: pear, apple, fig", reply)) == score


EXTRACT = 'Extract the person\'s name, age and city as JSON with keys "name", "age", "city": '


@pytest.mark.parametrize(
    "text, reply, score",
    [
        (
            "Maria Lopez is 34 years old and lives in Madrid.",
            '{"name": "Maria Lopez", "age": 34, "city": "Madrid"}',
            1.0,
        ),
        (
            "Maria Lopez is 34 years old and lives in Madrid.",
            '```json\n{"name": "maria lopez", "age": "34", "city": "Madrid"}\n```',
            1.0,
        ),
        ("Meet Tom Green from Rome; Tom turned 33 this year.", '{"name": "Tom Green", "age": 33, "city": "Rome"}', 1.0),
        (
            "Our new colleague Ivan Diaz (28) works in the Seville office.",
            '{"name": "Ivan Diaz", "age": 28, "city": "Seville"}',
            1.0,
        ),
        (
            "Maria Lopez is 34 years old and lives in Madrid.",
            '{"name": "Maria Lopez", "age": 43, "city": "Spain"}',
            0.4,
        ),
        ("Maria Lopez is 34 years old and lives in Madrid.", '{"name": "John", "age": 1}', 0.1),  # JSON, wrong values
        (
            "Maria Lopez is 34 years old and lives in Madrid.",
            "name: Maria Lopez, age: 34, city: Madrid",
            0.0,
        ),  # no JSON
        ("Maria Lopez is 34 years old and lives in Madrid.", '{"name": "Maria Lopez", "age": 34,', 0.0),  # broken
    ],
)
def test_extract_json_checks_each_field(text, reply, score):
    assert judges.extract_json(asked(EXTRACT + text, reply)) == pytest.approx(score)


# X to move; X wins at 5 (the diagonal 1-5-9); O threatens 3-5-7 as well
GAME = "Tic-tac-toe: you are X and it is your move. Board: X.OX.OO.X\n" + show("X.OX.OO.X")


def played(*cells: int | str, text: str = "") -> list[dict]:
    """A game in which the agent called play with each of `cells` in turn (tool results as the tool gives them)."""
    messages, board = [{"role": "user", "content": GAME}], "X.OX.OO.X"
    for index, cell in enumerate(cells):
        arguments = json.dumps({"board": board, "cell": cell})
        call = {"id": f"c{index}", "type": "function", "function": {"name": "play", "arguments": arguments}}
        result = play(board, cell) if isinstance(cell, int) else "error: ..."
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{index}", "content": result},
        ]
        board = result.split("Board: ")[1][:9] if "Board: " in result else board
    return [*messages, {"role": "assistant", "content": text}]


@pytest.mark.parametrize(
    "messages, score",
    [
        (played(5), 1.0),  # the winning move through the tool
        (played(text="I play 5."), 0.0),  # named in prose, no call: no move (the task asks for calls)
        (played(2), 0.2),  # legal, then O takes 5 and wins
        (played(8, 2), 0.2),  # legal, O wins at 5 at once: the second call comes after the game ended
        (played(1), 0.0),  # taken cell
        (played("five"), 0.0),  # no readable cell
        (played(text="Let me think."), 0.0),  # no move at all
    ],
)
def test_tictactoe_replays_the_game(messages, score):
    assert tictactoe(messages) == score


@pytest.mark.parametrize(
    "messages, score",
    [(played(5), 1.0), (played(2), 0.0), (played(8, 2), 0.0), (played(1), 0.0), (played(text="I play 5."), 0.0)],
)
def test_the_result_alone_scores_a_win_and_no_legal_move_that_loses(messages, score):
    assert judges.tictactoe_cell_strict(messages) == score


def test_a_constant_move_earns_only_the_wins_chance_gives_it_under_the_result_alone():
    """A policy that calls play with one cell on every held-out board: the example's judge pays it for its legal
    moves too; the result alone pays only the boards where that cell happens to win."""
    rows = [json.loads(line) for line in (ROOT / "benchmarks/perf/learning_tasks/tictactoe_cell.jsonl").open()]
    boards = [row["input"] for row in rows if row["split"] == "val"]

    def constant(judge, cell: int) -> float:
        call = {"id": "c", "type": "function", "function": {"name": "play", "arguments": json.dumps({"cell": cell})}}
        games = [[{"role": "user", "content": b}, {"role": "assistant", "tool_calls": [call]}] for b in boards]
        return sum(map(judge, games)) / len(games)

    for cell in range(1, 10):
        wins = sum(
            winner(place(board, cell - 1, "X")) == "X"
            for board in (BOARD.search(b).group(1) for b in boards)
            if board[cell - 1] == "."
        ) / len(boards)
        assert constant(judges.tictactoe_cell_strict, cell) == wins
        assert constant(tictactoe, cell) >= wins
    assert constant(tictactoe, 1) == 0.225 and constant(judges.tictactoe_cell_strict, 1) == 0.1875


def test_tictactoe_counts_a_call_the_tool_rejected_as_an_illegal_move():
    messages = played(5)
    messages[1]["tool_calls"][0]["function"]["arguments"] = json.dumps({"board": "X.OX.OO.X", "cell": "5"})
    messages[2]["content"] = "error: invalid arguments for 'play': '5' is not of type 'integer' (at cell)"
    assert tictactoe(messages) == 0.0


def test_tictactoe_ignores_the_board_the_agent_passes():
    messages = played(5)
    messages[1]["tool_calls"][0]["function"]["arguments"] = json.dumps({"board": "XX.......", "cell": 3})
    assert tictactoe(messages) == 0.0  # 3 is O's cell on the real board


def test_the_play_tool_answers_with_the_opponent_s_move():
    assert play("X.OX.OO.X", 5).startswith("You played 5 and won.")
    assert play("X.OX.OO.X", 2).startswith("You played 2; O played 5 and won.")
    assert play("X........", 1).startswith("error: cell 1 is not an empty cell")
    assert play("X..", 2).startswith("error: the board must be 9 characters")
    assert play("X........", 5).startswith("You played 5; O played 9. Board: X...X...O")  # blocks 1-5-9
    assert opponent_cell("XX.O.....") == 2  # blocks X
    assert opponent_cell("XX.OO....") == 5  # wins before blocking
    assert opponent_cell(".........") == 4  # the centre first


def move(question: str, cell: int) -> list[dict]:
    """One `play` call of `cell` after `question`, which the tool accepted."""
    call = {"id": "m1", "type": "function", "function": {"name": "play", "arguments": json.dumps({"cell": cell})}}
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "m1", "content": "accepted"},
    ]


def test_a_game_that_fills_the_board_is_a_draw():
    board = "XXOOXX.OO"  # X to move at 7 (cell index 6): no line, and the board is full
    assert winner(board[:6] + "X" + board[7:]) is None
    assert tictactoe(move(f"Board: {board}", 7)) == 0.5


def test_every_game_of_the_inputs_file_is_scored_from_its_board():
    """Boards that end in an empty cell too (9 of the 40 did; a word-boundary pattern missed them: score 0)."""
    rows = [json.loads(line) for line in (ROOT / "examples" / "tictactoe.jsonl").read_text().splitlines()]
    for row in rows:
        board = row["input"].split("Board: ")[1][:9]
        cell = winning_cells(board, "X")[0] + 1
        assert tictactoe(move(row["input"], cell)) == 1.0, board


def test_the_worked_games_for_the_warm_up_are_read_as_sft_conversations_and_each_one_wins():
    """examples/tictactoe_sft.jsonl (examples/tictactoe_demos.py): what `--sft-file` reads, each game a win when
    the judge replays it, none on a board of the task's inputs."""
    from pipelines.stages.sft import conversations

    games = conversations(ROOT / "examples" / "tictactoe_sft.jsonl")
    inputs = (ROOT / "examples" / "tictactoe.jsonl").read_text()
    assert len(games) == 24
    for game in games:
        messages = game.messages()
        assert tictactoe(messages) == 1.0
        assert messages[1]["content"].split("Board: ")[1][:9] not in inputs
        assert [t["function"]["name"] for t in game.tools] == ["play"]


@pytest.mark.parametrize(
    "judge, question, reply, score",
    [
        ("arithmetic_strict", "What is 12 + 7?", "19", 1.0),
        ("arithmetic_strict", "What is 12 + 7?", "**19.**", 1.0),
        ("arithmetic_strict", "What is 12 + 7?", "12 + 7 = 19", 0.5),  # the right sum in a few more words
        ("arithmetic_strict", "What is 12 + 7?", "The sum is 19.", 0.5),
        ("arithmetic_strict", "What is 12 + 7?", "To add them we count on from twelve by seven steps to get 19.", 0.2),
        ("arithmetic_strict", "What is 12 + 7?", "The sum is 20.", 0.0),
        ("arithmetic_strict", "What is 12 + 7?", "20", 0.0),  # a number alone is right or nothing
        ("arithmetic_strict", "What is 12 + 7?", "25", 0.0),
        ("arithmetic_strict", "What is 12 + 7?", "19.5", 0.0),
        ("capitals_strict", "What is the capital of Peru?", "Lima", 1.0),
        ("capitals_strict", "What is the capital of Peru?", '"lima."', 1.0),
        ("capitals_strict", "What is the capital of India?", "Delhi", 1.0),
        ("capitals_strict", "What is the capital of Peru?", "The capital of Peru is Lima.", 0.5),
        ("capitals_strict", "What is the capital of Peru?", "Lima or Santiago", 0.0),  # a list of guesses
        ("capitals_strict", "What is the capital of Peru?", "Santiago", 0.0),
        ("opposites_strict", 'What is the opposite of "hot"?', "Cold.", 1.0),
        ("opposites_strict", 'What is the opposite of "hot"?', "The opposite of hot is cold.", 0.5),
        ("opposites_strict", 'What is the opposite of "hot"?', "cold, dark, short", 0.0),  # a list of guesses
        ("alphabetical_strict", "Put these words in alphabetical order: pear, apple, fig", "apple, fig, pear", 1.0),
        ("alphabetical_strict", "Put these words in alphabetical order: pear, apple, fig", "apple fig pear.", 1.0),
        ("alphabetical_strict", "Put these words in alphabetical order: pear, apple, fig", "pear, apple, fig", 0.0),
        ("alphabetical_strict", "Put these words in alphabetical order: pear, apple, fig", "fig, apple, pear", 0.0667),
        ("alphabetical_strict", "Put these words in alphabetical order: pear, apple, fig", "Sorted: apple, fig, pear", 0.5),
        ("extract_json_strict", "Extract: Meet Ana Ruiz, 41, who lives in Quito.", '{"name": "Ana Ruiz", "age": 41, "city": "Quito"}', 1.0),
        ("extract_json_strict", "Extract: Meet Ana Ruiz, 41, who lives in Quito.", '```json\n{"name": "Ana Ruiz", "age": "41", "city": "Lima"}\n```', 0.6),
        ("extract_json_strict", "Extract: Meet Ana Ruiz, 41, who lives in Quito.", 'Here: {"name": "Ana Ruiz", "age": 41, "city": "Quito"}', 0.5),
        ("extract_json_strict", "Extract: Meet Ana Ruiz, 41, who lives in Quito.", "{}", 0.0),
    ],
)  # fmt: skip
def test_the_strict_judges_score_the_answer_alone_that_the_task_text_asks_for(judge, question, reply, score):
    assert getattr(judges, judge)(asked(question, reply)) == score


@pytest.mark.parametrize("task", ["arithmetic", "capitals", "opposites", "alphabetical", "extract_json"])
def test_a_strict_task_is_its_task_s_text_and_inputs_without_the_system_prompt(task):
    strict = load_task(ROOT / "benchmarks" / "perf" / "learning_tasks" / f"{task}_strict.toml")
    own = ROOT / "benchmarks" / "perf" / "learning_tasks" / f"{task}.toml"
    original = load_task(own if own.exists() else ROOT / "examples" / f"{task}.toml")
    assert strict.system_prompt is None and original.system_prompt is not None
    assert strict.description == original.description
    assert strict.inputs_file.resolve() == original.inputs_file.resolve()


@pytest.mark.parametrize(
    "judge, question, reply, score",
    [
        ("arithmetic_described", "What is 12 + 7?", "19", 1.0),
        ("arithmetic_described", "Calculate the sum of 12 and 7.", "19", 1.0),
        ("arithmetic_described", "If you have 12 apples and buy 7 more, how many do you have?", "You have 19.", 0.5),
        ("arithmetic_described", "Add 12 and 7.", "20", 0.0),
        ("arithmetic_described", "Add 12, 7 and 3.", "22", 0.0),  # three numbers: no question it can read
        ("arithmetic_described", "Add 1.5 and 2.", "3.5", 0.0),
        ("arithmetic_described", "Add two numbers.", "4", 0.0),
        ("capitals_described", "Which city is the capital of Peru?", "Lima", 1.0),
        ("capitals_described", "Peru's capital?", "The capital of Peru is Lima.", 0.5),
        ("capitals_described", "Name the capital of Nigeria.", "Abuja", 1.0),
        ("capitals_described", "Name the capital of Ghana.", "Accra", 0.0),  # a country it does not know
        ("capitals_described", "Compare Peru and Chile.", "Lima", 0.0),  # two countries
        ("capitals_described", "What is the capital of Atlantis?", "Atlantis City", 0.0),
    ],
)  # fmt: skip
def test_the_described_judges_read_a_question_in_any_wording(judge, question, reply, score):
    assert getattr(judges, judge)(asked(question, reply)) == score


@pytest.mark.parametrize("task", ["arithmetic", "capitals"])
def test_a_described_task_is_the_strict_task_s_text_alone(task):
    described = load_task(ROOT / "benchmarks" / "perf" / "learning_tasks" / f"{task}_described.toml")
    strict = load_task(ROOT / "benchmarks" / "perf" / "learning_tasks" / f"{task}_strict.toml")
    assert described.description == strict.description
    assert (described.system_prompt, described.inputs_file, described.seed_examples) == (None, None, [])


@pytest.mark.parametrize("example", ["tictactoe", "capitals"])
def test_a_text_task_is_the_example_without_its_system_prompt(example):
    text = load_task(learning.task_file(f"{example}_text"))  # capitals_text is an example itself
    original = load_task(ROOT / "examples" / f"{example}.toml")
    assert text.system_prompt is None and original.system_prompt is not None
    assert (text.description, text.max_turns) == (original.description, original.max_turns)
    assert text.inputs_file.resolve() == original.inputs_file.resolve()
    tools = [[(t.name, Path(t.function.rsplit(":", 1)[0]).resolve()) for t in task.tools] for task in (text, original)]
    assert tools[0] == tools[1]
    assert getattr(judges, f"{example}_text") is getattr(judges, example)


CONTENT_INPUTS = {
    "arithmetic": "examples/arithmetic.jsonl", "capitals": "examples/capitals.jsonl",
    "opposites": "benchmarks/perf/learning_tasks/opposites.jsonl",
    "alphabetical": "benchmarks/perf/learning_tasks/alphabetical.jsonl",
    "extract_json": "benchmarks/perf/learning_tasks/extract_json.jsonl", "tictactoe": "examples/tictactoe.jsonl",
}  # fmt: skip
DEGENERATE = {
    "the question copied": lambda question: question,
    "a constant number": lambda question: "10",
    "a constant city": lambda question: "Paris",
    "a constant move": lambda question: "I play 1.",
    "every capital listed": lambda question: ", ".join(judges.CAPITALS.values()),
    "every opposite listed": lambda question: ", ".join(sorted(judges.VOCABULARY)),
    "every number listed": lambda question: " ".join(map(str, range(41))),
    "an empty object": lambda question: "{}",
}
"""Answers that say nothing about the input: a judge that scores one of them as well as the base model's own
answers can be gamed by training."""


RESULTS = {
    **{task: f"learning_content_{task}_s[0-9].json" for task in CONTENT_INPUTS},
    **{f"{task}_strict": f"learning_strict20_{task}_s[0-9].json" for task in CONTENT_INPUTS if task != "tictactoe"},
}
"""Each judged task's learning results, whose base held-out means a degenerate answer must stay below."""


@pytest.mark.parametrize("task", list(RESULTS))
def test_no_degenerate_answer_scores_as_well_as_the_base_model_s_held_out_answers(task):
    """Each content and strict judge scores every degenerate answer, over the task's validation inputs, below the
    base model's held-out mean (the lowest of the learning benchmark's recorded seeds: `RESULTS`), or 0 where
    that mean is 0."""
    bases = [
        json.loads(path.read_text())["runs"][0]["base"]["mean"]
        for path in (ROOT / "benchmarks" / "perf" / "results").glob(RESULTS[task])
    ]
    rows = [json.loads(line) for line in (ROOT / CONTENT_INPUTS[task.removesuffix("_strict")]).read_text().splitlines()]
    questions = [row["input"] for row in rows if row["split"] == "val"]
    judge = getattr(judges, task)
    assert bases and questions
    for name, degenerate in DEGENERATE.items():
        scores = [judge(asked(q, degenerate(q))) for q in questions]
        mean = sum(scores) / len(scores)
        assert mean < min(bases) or mean == 0, (name, mean, min(bases))  # 0 where the base model scored 0
