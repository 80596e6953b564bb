"""RULER's parts without a model: prompt layout, answer validation, bad inputs, judge loading, custom judges, cache."""

from __future__ import annotations

import asyncio
import json

import pytest
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message import ChatCompletionMessage

import ruler
from autorl.trajectories import Trajectory, TrajectoryGroup
from ruler import (
    CombinedJudge,
    FunctionJudge,
    JudgeCache,
    JudgeFailedError,
    JudgeModel,
    JudgeSpecError,
    RetryPolicy,
    RulerError,
    RulerInputError,
    RulerJudge,
    TrajectoryScore,
)
from ruler.prompt import build_judge_prompt, common_prefix_length
from ruler.scores import InvalidAnswer, parse_verdicts, response_format

UNREACHABLE = "judge@http://127.0.0.1:9/v1"  # bad inputs must fail before any request is made


def chat(*contents: str) -> list[dict]:
    roles = ["system", "user"] + ["assistant", "user"] * len(contents)
    return [{"role": role, "content": c} for role, c in zip(roles, contents, strict=False)]


def run(coro):
    return asyncio.run(coro)


# --- prompt layout -----------------------------------------------------------------------------


def test_shared_prefix_is_sent_once_and_identical_trajectories_once():
    lists = [chat("sys", "task", "answer A"), chat("sys", "task", "answer B"), chat("sys", "task", "answer A")]
    prompt = build_judge_prompt(lists, "the rubric", tools=[{"type": "function", "function": {"name": "search"}}])
    assert prompt.prefix_length == 2
    assert prompt.ids == ["1", "2"] and prompt.id_of == ["1", "2", "1"]
    system, user = (m["content"] for m in prompt.messages)
    assert "the rubric" in system and "1, 2." in system
    assert user.count('"content": "task"') == 1 and user.count("answer A") == 1
    assert user.index("<tools>") < user.index("<context>") < user.index('<trajectory id="1">')


def test_prefix_leaves_each_trajectory_a_message_of_its_own():
    short, longer = chat("sys", "task", "done"), chat("sys", "task", "done", "more?", "yes")
    assert common_prefix_length([short, longer]) == 2
    assert common_prefix_length([chat("a", "b", "x"), chat("z", "b", "x")]) == 0


def test_choices_are_judged_as_assistant_messages():
    choice = Choice(index=0, finish_reason="stop", message=ChatCompletionMessage(role="assistant", content="42"))
    lists = ruler.prompt.as_message_lists([[*chat("s", "q"), choice], chat("s", "q", "41")], min_trajectories=2)
    prompt = build_judge_prompt(lists, "r")
    assert '{"role": "assistant", "content": "42"}' in prompt.messages[1]["content"]


# --- answer validation -------------------------------------------------------------------------


def test_response_format_demands_exactly_the_ids():
    schema = response_format(["1", "2"])["json_schema"]["schema"]["properties"]["scores"]
    assert schema["required"] == ["1", "2"] and schema["additionalProperties"] is False


def answer(scores: dict) -> str:
    return json.dumps({"scores": {k: {"explanation": "e", "score": v} for k, v in scores.items()}})


def test_scores_are_clamped_and_flagged():
    verdicts = parse_verdicts(answer({"1": -0.5, "2": 3, "3": 0.4}), ["1", "2", "3"])
    assert [(v.score, v.clamped) for v in verdicts.values()] == [(0.0, True), (1.0, True), (0.4, False)]


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "not JSON"),
        ('{"verdict": 1}', 'no "scores" object'),
        (answer({"1": 0.5}), r"1 scores for 2 trajectories \(missing ids \['2'\]"),
        (answer({"1": 0.5, "2": 0.5, "3": 0.1}), r"unknown \['3'\]"),
        (
            '{"scores": {"1": {"explanation": "e", "score": 1}, "1": {"explanation": "e", "score": 0}, "2": {}}}',
            "duplicate",
        ),
        (
            '{"scores": {"1": {"explanation": "e", "score": NaN}, "2": {"explanation": "e", "score": 1}}}',
            "finite numeric",
        ),
        (answer({"1": True, "2": 0.5}), "finite numeric"),
        (answer({"1": "0.9", "2": 0.5}), "finite numeric"),
    ],
)
def test_invalid_answers_are_rejected(text, message):
    with pytest.raises(InvalidAnswer, match=message):
        parse_verdicts(text, ["1", "2"])


def test_backoff_doubles_up_to_the_cap():
    policy = RetryPolicy(initial_backoff_s=1, max_backoff_s=5, jitter=0)
    assert [policy.backoff_s(n) for n in range(1, 6)] == [1, 2, 4, 5, 5]
    jittered = RetryPolicy(initial_backoff_s=1, jitter=0.5)
    assert all(1 <= jittered.backoff_s(1) <= 1.5 for _ in range(50))


# --- bad input: one clear error each -----------------------------------------------------------


@pytest.mark.parametrize(
    "lists, message",
    [
        ([], "empty group"),
        ([chat("s", "q", "a"), chat("s", "q")], "trajectory 2 has no assistant message"),
        ([chat("s", "q", "a"), ["not a message"]], "trajectory 2 holds an item that is not a chat message"),
    ],
)
def test_bad_groups_fail_with_one_line(lists, message):
    with pytest.raises(RulerInputError, match=message) as info:
        run(ruler.ruler(lists, UNREACHABLE, cache_dir=None))
    assert isinstance(info.value, RulerError) and "\n" not in str(info.value)


def test_empty_trajectory_group_fails_for_any_judge():
    with pytest.raises(RulerInputError, match="empty group"):
        run(ruler.ruler_score_group(TrajectoryGroup([]), FunctionJudge(len)))


@pytest.mark.parametrize("spec", ["nosuchprovider/some-model", "gpt-nonsense-without-provider"])
def test_unknown_provider_is_one_clear_error(spec):
    with pytest.raises(JudgeSpecError, match=f"judge '{spec}' names no known LiteLLM provider") as info:
        ruler.load_judge(spec)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("spec", ["", "@http://127.0.0.1:8000/v1"])
def test_an_empty_model_name_is_one_clear_error(spec):
    with pytest.raises(JudgeSpecError, match=f"judge '{spec}' names no model; use 'provider/model'"):
        ruler.load_judge(spec)


def test_credentials_are_refused_in_extra_params():
    with pytest.raises(ValueError, match="may not carry credentials"):
        JudgeModel(model="openai/gpt-4.1-mini", extra_params={"api_key": "sk-x"})
    assert JudgeModel(model="m", extra_params={"max_completion_tokens": 9}).extra_params


# --- judge specs -------------------------------------------------------------------------------


def test_model_specs_become_ruler_judges_without_starting_anything():
    assert ruler.load_judge("openai/gpt-4.1-mini").model.model == "openai/gpt-4.1-mini"
    assert ruler.load_judge("ollama/llama3:8b").model.model == "ollama/llama3:8b"  # a colon, yet no module
    embedded = ruler.load_judge("embedded")
    assert isinstance(embedded, RulerJudge) and embedded.model.model == "embedded"
    local = ruler.load_judge("Qwen/Qwen3-8B@http://127.0.0.1:8000/v1").model
    assert (local.model, local.base_url) == ("Qwen/Qwen3-8B", "http://127.0.0.1:8000/v1")


def test_cache_identity_names_the_server_never_its_credentials_and_the_embedded_judge_stays_embedded():
    a = JudgeModel(model="m", base_url="http://127.0.0.1:1/v1", api_key_env="A")
    b = JudgeModel(model="m", base_url="http://10.9.9.9/v1", api_key_env="B")
    assert a.identity() != b.identity()  # the same name on two servers: not each other's answers
    assert a.identity() == {
        "model": "m", "temperature": None, "max_tokens": None, "extra_params": {}, "endpoint": "127.0.0.1:1/v1"
    }  # fmt: skip
    assert b.identity()["endpoint"] == "10.9.9.9:80/v1"
    keyed = JudgeModel.parse("m@https://user:s3cret@judge.example.com/v1")
    assert keyed.identity()["endpoint"] == "judge.example.com:443/v1" and "s3cret" not in str(keyed.identity())
    same = JudgeModel(model="m", base_url="http://127.0.0.1:1/v1/", api_key_env="C", api_key="k")
    assert same.identity() == a.identity()  # the key and a trailing slash are not the endpoint's identity
    other_path = JudgeModel(model="m", base_url="http://127.0.0.1:1/teamB/v1", api_key_env="A")
    assert other_path.identity() != a.identity()  # a gateway's paths: one team's scores are not another's
    embedded = JudgeModel.parse("embedded")
    assert embedded.identity() == {"model": "embedded", "temperature": None, "max_tokens": None, "extra_params": {}}


USER_JUDGES = """
from ruler import FunctionJudge, TrajectoryScore

def short(messages):
    return 1.0 / len(messages[-1]["content"])

async def async_short(messages):
    return short(messages)

class Constant:
    name = "constant"
    async def score_group(self, message_lists, *, rubric, tools):
        return [TrajectoryScore(trajectory_id=str(i), explanation="c", score=0.5) for i, _ in enumerate(message_lists, 1)]

constant = Constant()
not_a_judge = 42
"""


@pytest.fixture
def judges_file(tmp_path):
    path = tmp_path / "my_judges.py"
    path.write_text(USER_JUDGES)
    return path


def test_module_attribute_specs_load_user_judges(judges_file, monkeypatch):
    lists = [chat("s", "q", "ab"), chat("s", "q", "abcd")]
    expectations = {"short": [0.5, 0.25], "async_short": [0.5, 0.25], "constant": [0.5, 0.5], "Constant": [0.5, 0.5]}
    for attribute, expected in expectations.items():
        judge = ruler.load_judge(f"{judges_file}:{attribute}")
        assert [s.score for s in run(judge.score_group(lists, rubric="", tools=None))] == expected
    monkeypatch.chdir(judges_file.parent)  # `module:attribute` finds modules in the working directory
    assert ruler.load_judge("my_judges:constant").name == "constant"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("{file}:missing", "has no attribute 'missing'"),
        ("{file}:not_a_judge", "is a int, not a judge"),
        ("{dir}/absent.py:judge", "absent.py does not exist"),
        ("no_such_module_for_ruler:judge", "no module named 'no_such_module_for_ruler'"),
    ],
)
def test_bad_module_attribute_specs_fail_with_one_line(judges_file, spec, message):
    with pytest.raises(JudgeSpecError, match=message) as info:
        ruler.load_judge(spec.format(file=judges_file, dir=judges_file.parent))
    assert "\n" not in str(info.value)


def test_a_judge_file_that_raises_is_reported(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(JudgeSpecError, match="failed to load: RuntimeError: boom"):
        ruler.load_judge(f"{broken}:judge")


# --- custom judges -----------------------------------------------------------------------------


def test_function_judge_scores_a_group_of_one_and_rejects_non_numbers():
    group = TrajectoryGroup([Trajectory(messages_and_choices=chat("s", "q", "hello"), reward=3.0)])
    scored = run(ruler.ruler_score_group(group, FunctionJudge(lambda m: len(m[-1]["content"]), name="length")))
    assert scored.trajectories[0].reward == 5 and scored.trajectories[0].metrics["independent_reward"] == 3.0
    assert scored.trajectories[0].logs == ["length: length = 5"]
    with pytest.raises(JudgeFailedError, match="gave trajectory 1 the score None"):
        run(FunctionJudge(lambda m: None).score_group([chat("s", "q", "a")]))


def test_combined_judge_weights_and_namespaces_metrics():
    class Fixed:
        name = "fixed"

        async def score_group(self, message_lists, *, rubric, tools):
            return [
                ruler.TrajectoryScore(trajectory_id=str(i), explanation="f", score=1.0, metrics={"calls": 1.0})
                for i in range(1, len(message_lists) + 1)
            ]

    length = FunctionJudge(lambda m: len(m[-1]["content"]) / 10, name="length")
    judge = CombinedJudge([Fixed(), length, length], weights=[0.5, 0.25, 0.25])
    scores = run(judge.score_group([chat("s", "q", "ab"), chat("s", "q", "abcd")], rubric="r"))
    assert [s.score for s in scores] == pytest.approx([0.5 + 0.5 * 0.2, 0.5 + 0.5 * 0.4])
    assert scores[0].metrics == {"fixed_score": 1.0, "fixed/calls": 1.0, "length_score": 0.2, "length_2_score": 0.2}
    assert scores[1].explanation == "fixed: f; length: length = 0.4; length_2: length = 0.4"
    assert [s.score for s in run(CombinedJudge([length, Fixed()]).score_group([chat("s", "q", "ab")], rubric="r"))] == [
        0.6
    ]


def verdict(i: int, score: object) -> TrajectoryScore:
    return TrajectoryScore(trajectory_id=str(i), explanation="", score=score)


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        ([], r"^judge Bad returned 0 scores for 2 trajectories$"),
        ("0.9", r"^judge Bad returned str '0.9'; score_group must return a list of TrajectoryScore$"),
        ([0.9, 0.1], r"^judge Bad returned float 0.9 for trajectory 1; expected a TrajectoryScore$"),
        ([verdict(1, 0.5), verdict(2, float("nan"))], r"^judge Bad gave trajectory 2 the score nan; expected a finite"),
        ([verdict(1, float("inf")), verdict(2, 0)], r"^judge Bad gave trajectory 1 the score inf; expected a finite"),
        (RuntimeError("the grader crashed"), r"^the grader crashed$"),
    ],
)
def test_a_custom_judge_returning_nonsense_or_raising_is_one_line_and_a_dropped_group(returned, message, caplog):
    class Bad:
        async def score_group(self, message_lists, *, rubric, tools):
            if isinstance(returned, Exception):
                raise returned
            return returned

    group = TrajectoryGroup([Trajectory(messages_and_choices=chat("s", "q", a)) for a in "ab"])
    with pytest.raises(Exception, match=message) as error:
        run(ruler.ruler_score_group(group, Bad()))
    assert "\n" not in str(error.value)
    with caplog.at_level("WARNING", logger="ruler"):
        assert run(ruler.ruler_score_group(group, Bad(), swallow_exceptions=True)) is None
    assert "judge Bad could not score a group of 2 trajectories" in caplog.text


def test_swallowed_bad_group_is_logged_and_dropped(caplog):
    group = TrajectoryGroup([Trajectory(messages_and_choices=chat("s", "q"))])  # no answer to judge
    with caplog.at_level("WARNING", logger="ruler"):
        assert run(ruler.ruler_score_group(group, UNREACHABLE, swallow_exceptions=True, cache_dir=None)) is None
    assert "could not score a group of 1 trajectories: RulerInputError: trajectory 1 has no assistant" in caplog.text


@pytest.mark.parametrize(
    "args, message",
    [
        (([],), "at least one judge"),
        (([42],), "not judges"),
        (([FunctionJudge(len)], [1, 2]), "one finite weight per judge"),
    ],
)
def test_combined_judge_rejects_bad_construction(args, message):
    with pytest.raises(JudgeSpecError, match=message):
        CombinedJudge(*args)


# --- cache -------------------------------------------------------------------------------------


def test_cache_round_trip_is_atomic_and_survives_corruption(tmp_path):
    cache = JudgeCache(tmp_path)
    key = ruler.cache.cache_key({"judge": {"model": "m"}, "messages": []})
    assert cache.get(key) is None
    cache.put(key, {"verdicts": {"1": {"explanation": "e", "score": 1.0, "clamped": False}}})
    assert cache.get(key)["verdicts"]["1"]["score"] == 1.0
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == [f"{key}.json"]  # no temporary file left
    (tmp_path / key[:2] / f"{key}.json").write_text("{truncated")
    assert cache.get(key) is None


def test_default_cache_dir_follows_autorl_home(monkeypatch, tmp_path):
    monkeypatch.setenv("AUTORL_HOME", str(tmp_path))
    assert ruler.default_cache_dir() == tmp_path / "cache" / "ruler"
    monkeypatch.delenv("AUTORL_HOME")
    assert str(ruler.default_cache_dir()) == ".autorl/cache/ruler"


# --- the task, answer bounds and fitting into a small context ----------------------------------

TASK = "Help customers of ShopCo get refunds for damaged orders, following the refund policy."


class StubClient:
    """Stands in for `JudgeClient`: records each request and answers every id with 0.5."""

    def __init__(self):
        self.requests: list[dict] = []

    async def complete(self, messages, response_format, usage, max_tokens=None):
        self.requests.append({"messages": messages, "response_format": response_format, "max_tokens": max_tokens})
        ids = response_format["json_schema"]["schema"]["properties"]["scores"]["required"]
        return answer(dict.fromkeys(ids, 0.5)), "stop"


def stub_judge(model: str | JudgeModel, cache_dir=None) -> tuple[RulerJudge, StubClient]:
    judge = RulerJudge(model, cache_dir=cache_dir)
    judge._client = stub = StubClient()
    return judge, stub


def test_the_task_is_stated_in_the_system_message_outside_the_trajectories():
    lists = [chat("sys", "my order arrived broken", "refund sent"), chat("sys", "my order arrived broken", "no")]
    system, user = (m["content"] for m in build_judge_prompt(lists, "Be kind.", task=TASK).messages)
    assert f"<task>\n{TASK}\n</task>" in system and system.index(TASK) < system.index("Rubric:\nBe kind.")
    assert TASK not in user
    untold = build_judge_prompt(lists, "Be kind.").messages[0]["content"]
    assert "<task>" not in untold and "Rubric:\nBe kind." in untold


def test_the_task_is_part_of_the_cache_key(tmp_path):
    judge, stub = stub_judge(UNREACHABLE, cache_dir=tmp_path)
    lists = [chat("s", "q", "a"), chat("s", "q", "b")]
    run(judge.score_group(lists, task=TASK))
    run(judge.score_group(lists, task="Another task."))
    run(judge.score_group(lists, task=TASK))
    assert len(stub.requests) == 2
    assert TASK in stub.requests[0]["messages"][0]["content"]
    assert "Another task." in stub.requests[1]["messages"][0]["content"]
    run(ruler.ruler(lists, UNREACHABLE, cache_dir=tmp_path, task=TASK))  # ruler.ruler passes it on: a cache hit


def test_explanations_are_bounded_in_the_schema_and_the_prompt():
    entry = response_format(["1", "2"])["json_schema"]["schema"]["properties"]["scores"]["properties"]["1"]
    assert entry["properties"]["explanation"] == {"type": "string", "maxLength": ruler.scores.EXPLANATION_MAX_CHARS}
    system = build_judge_prompt([chat("s", "q", "a"), chat("s", "q", "b")], "r").messages[0]["content"]
    assert f"at most {ruler.scores.EXPLANATION_MAX_CHARS} characters" in system


def test_a_judge_told_not_to_explain_asks_for_scores_alone_in_a_few_tokens_and_caches_them_apart(tmp_path):
    entry = response_format(["1", "2"], explain=False)["json_schema"]["schema"]["properties"]["scores"]["properties"]
    assert entry["1"]["properties"].keys() == {"score"} and entry["1"]["required"] == ["score"]
    lists = [chat("s", "q", a) for a in ["a", "b", "c"]]
    system = build_judge_prompt(lists, "r", explain=False).messages[0]["content"]
    assert "explanation" not in system and '"score": <0 to 1>' in system
    assert ruler.scores.answer_tokens(3, explain=False) * 2 < ruler.scores.answer_tokens(3)
    judge, stub = stub_judge("embedded", cache_dir=tmp_path)  # its context is known: max_tokens is sized
    judge.explain = False
    scores = run(judge.score_group(lists))
    assert [s.score for s in scores] == [0.5] * 3
    assert stub.requests[-1]["max_tokens"] == ruler.scores.answer_tokens(3, explain=False)
    judge.explain = True  # another prompt and schema: not the cached scores-only answer
    run(judge.score_group(lists))
    assert len(stub.requests) == 2 and "explanation" in stub.requests[-1]["messages"][0]["content"]


def test_max_tokens_is_sized_to_the_group_when_the_context_is_known():
    sized = ruler.scores.answer_tokens
    assert sized(2) < sized(4) < sized(6) and sized(6) >= 6 * ruler.scores.EXPLANATION_MAX_CHARS // 2
    lists = [chat("s", "q", a) for a in ["a", "b", "c", "a"]]  # 3 distinct trajectories
    embedded, stub = stub_judge("embedded")  # the embedded server's max_model_len is its context
    run(embedded.score_group(lists))
    assert stub.requests[-1]["max_tokens"] == sized(3)
    small, stub = stub_judge(JudgeModel(model="m", base_url="http://127.0.0.1:9/v1", context_tokens=4096))
    run(small.score_group(lists))
    assert stub.requests[-1]["max_tokens"] == sized(3)
    own, stub = stub_judge(JudgeModel(model="m", base_url="http://127.0.0.1:9/v1", context_tokens=4096, max_tokens=77))
    run(own.score_group(lists))
    assert stub.requests[-1]["max_tokens"] == 77
    unknown, stub = stub_judge(UNREACHABLE)  # unknown context (maybe a thinking model): the model's own setting
    run(unknown.score_group(lists))
    assert stub.requests[-1]["max_tokens"] is None


def test_a_group_too_long_for_the_context_is_shortened_visibly_and_deterministically():
    long_answer = "I am sorry your order arrived damaged. " * 120  # 4,680 characters
    lists = [chat("sys", "refund?", a) for a in (long_answer, "Refund sent.", long_answer + "!")]
    model = JudgeModel(model="m", base_url="http://127.0.0.1:9/v1", context_tokens=2048)
    judge, stub = stub_judge(model)
    scores = run(judge.score_group(lists, task=TASK))
    assert [s.metrics["ruler_shortened"] for s in scores] == [1.0, 0.0, 1.0]
    request = stub.requests[0]
    system, user = (m["content"] for m in request["messages"])
    assert user.count("…[shortened ") == 2 and "Refund sent." in user and TASK in system
    assert "were shortened" in system  # the judge is told what the marker means
    budget = 2048 - request["max_tokens"] - ruler.ruler_judge.PROMPT_MARGIN_TOKENS
    assert ruler.prompt.estimate_prompt_tokens(request["messages"]) <= budget
    again = build_judge_prompt(lists, ruler.DEFAULT_RUBRIC, task=TASK, max_prompt_tokens=budget)
    assert again.messages == request["messages"] and again.shortened == [True, False, True]
    assert build_judge_prompt(lists, "r", max_prompt_tokens=10**6).shortened == [False, False, False]


def test_shortening_keeps_head_and_tail_around_a_marker():
    text = "".join(f"{i:04d}" for i in range(500))  # 2,000 characters
    short = ruler.prompt.shorten(text, 300)
    assert short.startswith(text[:200]) and short.endswith(text[-100:]) and "…[shortened 1700 chars]…" in short
    assert ruler.prompt.shorten("x" * 330, 300) == "x" * 330  # too little to gain


def test_a_group_that_cannot_fit_even_shortened_is_one_clear_error():
    judge, stub = stub_judge(JudgeModel(model="m", base_url="http://127.0.0.1:9/v1", context_tokens=900))
    lists = [chat("s", "q", f"answer {i} " * 200) for i in range(6)]
    with pytest.raises(RulerInputError, match="even with every message shortened to 64 characters") as info:
        run(judge.score_group(lists, rubric=ruler.DEFAULT_RUBRIC))
    assert "\n" not in str(info.value) and not stub.requests


def test_custom_judges_get_the_task_only_when_they_take_it():
    seen = {}

    class Old:  # written before `task` existed
        name = "old"

        async def score_group(self, message_lists, *, rubric, tools):
            count = len(message_lists)
            return [
                ruler.TrajectoryScore(trajectory_id=str(i), explanation="o", score=1.0) for i in range(1, count + 1)
            ]

    class New(Old):
        name = "new"

        async def score_group(self, message_lists, *, rubric, tools, task=None):
            seen[self.name] = task
            return await super().score_group(message_lists, rubric=rubric, tools=tools)

    class Loose(Old):
        name = "loose"

        async def score_group(self, message_lists, **kwargs):
            seen[self.name] = kwargs.get("task")
            return await Old.score_group(self, message_lists, rubric=kwargs["rubric"], tools=kwargs["tools"])

    group = TrajectoryGroup([Trajectory(messages_and_choices=chat("s", "q", a)) for a in "ab"])
    for judge in (Old(), New(), Loose(), CombinedJudge([Old(), New(), Loose()])):
        assert [t.reward for t in run(ruler.ruler_score_group(group, judge, task=TASK))] == [1.0, 1.0]
    assert seen == {"new": TASK, "loose": TASK}
    assert not ruler.judges.takes_task(Old()) and ruler.judges.takes_task(FunctionJudge(len))
