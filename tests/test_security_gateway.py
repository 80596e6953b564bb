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
