"""The capture gateway as a hostile agent tries it, over real HTTP (http.client: bytes as written): a body nested
past the parser's depth, messages that are not messages, tools that are not tools, a declared length past the
limit, a chunked body past it; each a 4xx at once, none a 500 or a cut answer, nothing recorded."""

from __future__ import annotations

import asyncio
import http.client
import json

import pytest

import autorl as art
from autorl.capture.gateway import CaptureGateway

OK = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
HOSTILE = {
    "nested 100000 deep": (b'{"messages": [' + b"[" * 100_000 + b"]}", {}, 400),
    "messages that are numbers": (b'{"messages": [1, 2]}', {}, 400),
    "messages without a role": (b'{"messages": [{"x": {"y": 1}}]}', {}, 400),
    "tools that are a number": (b'{"messages": [{"role": "user", "content": "hi"}], "tools": 5}', {}, 400),
    "a declared length past the limit": (b"", {"Content-Length": str(2**40)}, 413),
    "a chunked body past the limit": ([b"x" * 65536] * 80, {"Transfer-Encoding": "chunked"}, 413),
}
"""Requests to a rollout's chat completions route: body, headers, the status they get."""


def post(port: int, path: str, body, headers: dict[str, str]) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        chunked = headers.get("Transfer-Encoding") == "chunked"
        connection.putrequest("POST", path)
        for name, value in headers.items():
            connection.putheader(name, value)
        if "Content-Length" not in headers and not chunked:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders()
        try:
            for chunk in body if chunked else [body]:
                connection.send(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
            if chunked:
                connection.send(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):  # refused before the body ended: the answer says why
            pass
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_security_a_hostile_request_to_the_gateway_is_a_4xx_at_once_and_records_nothing(chat, case):
    body, headers, status = HOSTILE[case]

    async def probe() -> tuple[int, bytes, art.Trajectory]:
        async with CaptureGateway(art.Model(name="m", inference_base_url=chat.base_url)) as gateway:
            rollout = gateway.rollout()
            port = int(gateway.url.rsplit(":", 1)[1])
            path = f"/rollouts/{rollout.id}/v1/chat/completions"
            answer = await asyncio.to_thread(
                post, port, path, body, {"Authorization": f"Bearer {gateway.key}", **headers}
            )
            fine = await asyncio.to_thread(post, port, path, OK, {"Authorization": f"Bearer {gateway.key}"})
            assert fine[0] == 200, fine  # the gateway still answers
            return *answer, gateway.finish(rollout.id)

    got, text, trajectory = asyncio.run(probe())
    assert got == status and json.loads(text)["error"], (got, text)
    assert len(trajectory.messages_and_choices) == 2  # the fine call's message and choice only
    assert chat.requests[:-1] == []  # nothing hostile reached the model


def user(content: str, **extra) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": content, **extra}]}).encode()


def test_security_a_rollouts_calls_and_bytes_are_bounded_each_refusal_one_line(chat):
    """Calls per rollout (429), bytes per rollout (413) and across the open rollouts (429), each a one-line
    refusal before the model is asked; a key the chat API does not define is not recorded."""

    async def probe() -> dict:
        async with CaptureGateway(art.Model(name="m", inference_base_url=chat.base_url)) as gateway:
            rollouts = gateway.rollouts
            rollouts.max_calls, rollouts.max_rollout_bytes, rollouts.max_open_bytes = 3, 400_000, 700_000
            port, key = int(gateway.url.rsplit(":", 1)[1]), {"Authorization": f"Bearer {gateway.key}"}

            def to(rollout: str, body: bytes) -> tuple[int, bytes]:
                return post(port, f"/rollouts/{rollout}/v1/chat/completions", body, key)

            calls = gateway.rollout().id
            seen = {"calls": [await asyncio.to_thread(to, calls, user(f"turn {n}")) for n in range(4)]}
            extra = gateway.rollout().id  # a 3 MiB key a client adds: not recorded, not counted
            seen["extra"] = await asyncio.to_thread(to, extra, user("hi", padding="p" * 3 * 2**20))
            seen["extra_held"] = rollouts._open[extra].held
            big = gateway.rollout().id
            seen["big"] = [await asyncio.to_thread(to, big, user(f"{n}" * 300_000)) for n in range(3)]
            other = gateway.rollout().id
            seen["other"] = [await asyncio.to_thread(to, other, user(text)) for text in ("x" * 300_000, "x")]
            gateway.finish(big)
            seen["after"] = await asyncio.to_thread(to, other, user("y"))
            seen["recorded"] = gateway.finish(extra).messages_and_choices[0]
            return seen

    seen = asyncio.run(probe())
    assert [status for status, _ in seen["calls"]] == [200, 200, 200, 429]
    assert [status for status, _ in seen["big"]] == [200, 200, 413]  # it holds more than 400 kB after two
    assert [status for status, _ in seen["other"]] == [200, 429]  # the open ones hold more than 700 kB
    assert seen["after"][0] == 200  # one finished: room again
    for _, text in [seen["calls"][-1], seen["big"][-1], seen["other"][-1]]:
        line = json.loads(text)["error"]
        assert "\n" not in line and ("calls" in line or "bytes" in line), line
    assert seen["extra"][0] == 200 and seen["extra_held"] < 10_000
    assert seen["recorded"] == {"role": "user", "content": "hi"}
    assert len(chat.requests) == 3 + 1 + 2 + 1 + 1  # nothing refused reached the model


def test_security_the_open_rollout_cap_refuses_the_next_and_drops_none(chat):
    async def probe() -> tuple[int, list[str], list[str]]:
        gateway = CaptureGateway(art.Model(name="m", inference_base_url=chat.base_url), max_rollouts=2, any_id=True)
        async with gateway:
            opened = [gateway.rollout().id, gateway.rollout().id]
            with pytest.raises(art.AutoRLError, match="2 rollouts are open"):
                gateway.rollout()
            port, key = int(gateway.url.rsplit(":", 1)[1]), {"Authorization": f"Bearer {gateway.key}"}
            status, _ = await asyncio.to_thread(post, port, "/rollouts", b"{}", key)
            named, _ = await asyncio.to_thread(post, port, "/rollouts/mine/v1/chat/completions", OK, key)
            return status, named, opened, [rollout for rollout, _ in gateway.rollouts.unfinished()]

    status, named, opened, still_open = asyncio.run(probe())
    assert (status, named) == (429, 429)
    assert still_open == opened  # before: the oldest was dropped, never written


def test_security_recording_a_call_keys_only_its_own_messages_not_every_recorded_one(monkeypatch):
    """A rollout of 50 sub-agent histories: one more call keys its request's messages and what was recorded since
    (`Trajectory.add_completion` keeps each history's keys), not all 50 histories again."""
    from openai.types.chat.chat_completion import Choice

    from autorl import trajectories

    trajectory = art.Trajectory()
    answer = Choice.model_validate(
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "a"}}
    )
    for n in range(50):
        trajectory.add_completion([{"role": "user", "content": f"sub-agent {n}"}], None, answer)
    keyed = []
    monkeypatch.setattr(trajectories, "message_key", lambda item: keyed.append(item) or ("k", id(item)))
    trajectory.add_completion([{"role": "user", "content": "and one more"}], None, answer)
    assert len(keyed) == 1 + 2  # its own message, the last call's message and choice (before: all 100 recorded)
