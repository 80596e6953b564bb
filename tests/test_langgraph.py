"""autorl.langgraph: a real LangGraph ReAct agent whose model is `init_chat_model(...)`; its calls become a
Trajectory that the trainer's tokenization accepts.

The model's endpoint is a real HTTP server on 127.0.0.1 (the edge of the unit) that answers chat
completions as our vLLM server does: sampled tokens as `token_id:N` logprobs, tool calls parsed. Its
answer depends on the request only (a tool call to a user turn, the final answer to a tool result), so
concurrent rollouts get consistent answers. The same agent runs on the embedded model behind vLLM in
tests/test_backend_embedded.py (sharing that test's server).
"""

from __future__ import annotations

import asyncio
import copy
import json
import sys
import time
from collections.abc import Callable, Iterator

import pytest
from langgraph.prebuilt import create_react_agent
from openai.types.chat.chat_completion import Choice

import autorl as art
from autorl.backends.transport import GatedTransport, InferenceGate
from autorl.errors import AutoRLError, MissingExtraError, NoModelCallError
from autorl.langgraph import init_chat_model, wrap_rollout
from autorl.serving.embedded import TEMPLATES
from autorl.training.sequences import TOKEN_ID_PREFIX, tokenize_trajectory
from tests.helpers.chat_server import ChatCompletionServer
from tests.helpers.docs import DOCS, docs_example

# create_react_agent is LangGraph 1.x's ReAct agent (its successor lives in the `langchain` package)
pytestmark = pytest.mark.filterwarnings("ignore:create_react_agent has been moved:DeprecationWarning")

DOC = DOCS / "langgraph.md"
SYSTEM = "You add numbers with the add tool."
QUESTION = "What is 2 + 3?"


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def sampled(tokenizer, text: str) -> list[int]:
    """The token ids the policy sampled for `text`, end-of-turn included."""
    return [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]


def completion(model: str, message: dict, ids: list[int]) -> dict:
    """A chat completion as vLLM returns it with `--return-tokens-as-token-ids` and `logprobs=True`."""
    tokens = [
        {"token": f"{TOKEN_ID_PREFIX}{t}", "logprob": -0.1 * (i + 1), "bytes": None, "top_logprobs": []}
        for i, t in enumerate(ids)
    ]
    return {
        "id": f"chatcmpl-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "reasoning_content": None, **message},
                "logprobs": {"content": tokens},
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                "stop_reason": None,
            }
        ],
        "usage": {"prompt_tokens": 50, "completion_tokens": len(ids), "total_tokens": 50 + len(ids)},
    }


def call_text(arguments: dict) -> str:
    """A tool call as the embedded model's template writes it (what the policy samples)."""
    return f'<tool_call>\n{{"name": "add", "arguments": {json.dumps(arguments)}}}\n</tool_call>'


def adder(tokenizer) -> Callable[[dict], dict]:
    """Calls `add` on a user turn (call id from the question), answers with the tool's result after it."""

    def answer(body: dict) -> dict:
        last = body["messages"][-1]
        if last["role"] == "tool":
            text = f"The sum is {last['content']}."
            return completion(body["model"], {"content": text}, sampled(tokenizer, text))
        arguments = {"a": 2, "b": 3}
        call_id = f"chatcmpl-tool-{abs(hash(last['content'])) % 10**8}"
        call = {"id": call_id, "type": "function", "function": {"name": "add", "arguments": json.dumps(arguments)}}
        message = {"content": "", "tool_calls": [call]}
        return completion(body["model"], message, sampled(tokenizer, call_text(arguments)))

    return answer


@pytest.fixture
def server(tokenizer) -> Iterator[ChatCompletionServer]:
    policy = ChatCompletionServer(adder(tokenizer))
    yield policy
    policy.close()


@pytest.fixture
def model(server) -> art.Model:
    return art.Model(name="policy", inference_base_url=server.base_url, inference_api_key="test-key")


def agent(model: art.Model):
    return create_react_agent(init_chat_model(model), [add], prompt=SYSTEM)


def test_a_react_agent_becomes_a_trajectory_that_trains_every_model_turn(server, model, tokenizer):
    @wrap_rollout(model)
    async def rollout(question: str) -> art.Trajectory:
        result = await agent(model).ainvoke({"messages": [{"role": "user", "content": question}]})
        answer = result["messages"][-1].content
        return art.Trajectory(messages_and_choices=[], reward=float("5" in answer), metadata={"question": question})

    trajectory = asyncio.run(rollout(QUESTION))

    items = trajectory.messages_and_choices
    assert [m["role"] for m in trajectory.messages()] == ["system", "user", "assistant", "tool", "assistant"]
    assert items[:2] == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    call, result, final = items[2], items[3], items[4]
    assert isinstance(call, Choice) and isinstance(final, Choice)
    assert call.message.tool_calls[0].function.name == "add"
    assert json.loads(call.message.tool_calls[0].function.arguments) == {"a": 2, "b": 3}
    assert result["role"] == "tool" and result["content"] == "5"
    assert result["tool_call_id"] == call.message.tool_calls[0].id
    assert final.message.content == "The sum is 5."
    assert all(t.token.startswith(TOKEN_ID_PREFIX) for c in (call, final) for t in c.logprobs.content)
    assert [t["function"]["name"] for t in trajectory.tools] == ["add"]
    assert trajectory.tools == server.requests[-1]["tools"]
    # what the rollout returned is kept; the metrics count the recorded turns
    assert trajectory.reward == 1.0 and trajectory.metadata == {"question": QUESTION}
    call_ids, final_ids = sampled(tokenizer, call_text({"a": 2, "b": 3})), sampled(tokenizer, "The sum is 5.")
    assert trajectory.metrics == {
        "turns": 2,
        "tool_calls": 1,
        "completion_tokens": len(call_ids) + len(final_ids),
        "prompt_tokens": 2 * 50,
        "truncated": False,
    }
    # the requests asked for what training needs
    assert len(server.requests) == 2
    for request in server.requests:
        assert request["logprobs"] is True and request["temperature"] == 1.0 and request["model"] == "policy"
        assert not request.get("stream")

    # the trainer's tokenization (with the embedded model's tool template) trains exactly the sampled tokens
    tokenizer = copy.copy(tokenizer)
    tokenizer.chat_template = (TEMPLATES / "smollm2_tools.jinja").read_text()
    seq = tokenize_trajectory(trajectory, tokenizer)
    trained = [(t, lp) for t, m, lp in zip(seq.input_ids, seq.mask, seq.logprobs, strict=True) if m]
    assert [t for t, _ in trained] == call_ids + final_ids
    assert [lp for _, lp in trained] == [t.logprob for c in (call, final) for t in c.logprobs.content]
    context = tokenizer.decode([t for t, m in zip(seq.input_ids, seq.mask, strict=True) if not m])
    assert "<tool_response>\n5\n</tool_response>" in context and QUESTION in context


def test_concurrent_rollouts_each_get_their_own_calls_and_train(server, model, tokenizer, tiny_model, tmp_path):
    """A group of wrapped rollouts run concurrently; each trajectory holds its own conversation, and a
    GRPO step of the trainer takes the group."""
    from autorl.training.trainer import GRPOTrainer

    async def run(question: str) -> None:
        await agent(model).ainvoke({"messages": [{"role": "user", "content": question}]})

    rollout = wrap_rollout(model, run)  # the function form; `run` returns nothing
    questions = ["What is 2 + 3?", "Add 2 and 3.", "2 plus 3?"]
    groups = [art.TrajectoryGroup(rollout(q) for q in questions)]
    (group,) = asyncio.run(art.gather_trajectory_groups(groups, pbar_desc=None))
    assert not group.exceptions and len(server.requests) == 6
    users = sorted(t.messages()[1]["content"] for t in group)
    assert users == sorted(questions)
    for i, trajectory in enumerate(group):
        call = trajectory.messages_and_choices[2]
        assert trajectory.messages()[3]["tool_call_id"] == call.message.tool_calls[0].id
        assert trajectory.reward == 0.0
        trajectory.reward = float(i)

    trainer = GRPOTrainer(tiny_model, tmp_path / "checkpoints", art.TrainerConfig())
    metrics = trainer.step([group], art.TrainConfig())
    assert metrics["groups_trained"] == 1 and metrics["trained_tokens"] > 0


class GateOnlyBackend:
    """A backend that starts nothing: the model keeps the test server's endpoint, and its requests pass the
    backend's gate as a real backend's do (`Backend.transport`)."""

    def __init__(self) -> None:
        self.gate = InferenceGate()

    async def register(self, model) -> None:
        pass

    def transport(self, model) -> GatedTransport:
        return GatedTransport(self.gate)


def test_requests_wait_for_training_and_reach_the_newest_checkpoint(server):
    """The chat model uses the model's gated transport (held back while the model trains) and asks for
    the model's current inference name, which a training step may change."""
    model = art.TrainableModel(name="policy", inference_base_url=server.base_url, inference_api_key="test-key")
    backend = GateOnlyBackend()

    async def scenario() -> None:
        await model.register(backend)
        chat = init_chat_model(model)
        model.inference_model_name = "policy@0002"
        backend.gate.close()
        reply = asyncio.create_task(chat.ainvoke("Hi"))
        await asyncio.sleep(0.3)
        assert server.requests == []  # held back while "training"
        backend.gate.open()
        await reply

    asyncio.run(scenario())
    assert [r["model"] for r in server.requests] == ["policy@0002"]


def test_a_rollout_without_a_recorded_call_is_one_clear_error(server, model):
    other = art.Model(name="judge", inference_base_url=server.base_url)

    async def asks_another_model() -> None:
        await init_chat_model(other).ainvoke("Hi")

    async def does_nothing() -> None:
        return None

    for fn in (does_nothing, asks_another_model):
        with pytest.raises(NoModelCallError, match=r"no chat completion of 'policy'.*init_chat_model"):
            asyncio.run(wrap_rollout(model, fn)())
    assert len(server.requests) == 1  # the other model's call was made, not recorded


def test_init_chat_model_errors(model, monkeypatch):
    with pytest.raises(AutoRLError, match="only inside a wrap_rollout"):
        init_chat_model()
    with pytest.raises(AutoRLError, match="has no inference endpoint"):
        init_chat_model(art.Model(name="unregistered"))
    monkeypatch.setitem(sys.modules, "langchain_openai", None)  # as if the extra were not installed
    with pytest.raises(MissingExtraError, match=r"pip install 'autorl\[langgraph\]'"):
        init_chat_model(model)


def test_init_chat_model_inside_a_rollout_takes_its_model(server, model):
    """ART's form: `init_chat_model()` with no model inside a wrapped rollout."""

    async def run() -> None:
        await init_chat_model(max_tokens=16).ainvoke("Hi")

    trajectory = asyncio.run(wrap_rollout(model, run)())
    assert trajectory.messages()[0] == {"role": "user", "content": "Hi"}
    assert server.requests[0]["max_completion_tokens"] == 16


def test_the_docs_example_runs(server, model):
    group = asyncio.run(docs_example()["adder_group"](model))
    assert not group.exceptions and [t.reward for t in group] == [1.0, 1.0]
    assert [m["role"] for m in group.trajectories[0].messages()] == ["system", "user", "assistant", "tool", "assistant"]
    assert len(server.requests) == 4 and {r["max_completion_tokens"] for r in server.requests} == {48}
