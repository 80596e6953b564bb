"""A capture gateway for agents in any language: an HTTP address on this machine that an agent uses as its
OpenAI base URL, recording each chat completion into the trajectory of the rollout it names.

    async with CaptureGateway(model) as gateway:
        rollout = gateway.rollout()                 # a fresh id, its base URL, the gateway's key
        await run_agent(env=rollout.env())          # OPENAI_BASE_URL, OPENAI_API_KEY: any language's SDK reads them
        trajectory = gateway.finish(rollout.id)     # its calls; its reward, if the agent posted one

Routes (every one needs the gateway's key, `Authorization: Bearer <key>`): `POST /rollouts/<id>/v1/chat/completions`
(or `POST /v1/chat/completions` with the header `X-Autorl-Rollout: <id>`), passed on to the model under its current
inference name, its answer relayed as it arrives (a stream chunk by chunk) and recorded once complete
(`Trajectory.add_completion`); `POST /rollouts/<id>/reward` with `{"reward": R, "metrics": {...}}` (from Python:
`post_reward`). Nothing else is served. The gateway binds 127.0.0.1 unless told otherwise, its key is made per
gateway and never written, ids are random, a body is at most `max_body_bytes` (a longer declared length is refused before a byte is
read; a chunked body as it arrives), a request that is not a chat completion (messages with roles, tools a list of
objects) is a 400 and reaches no model, and a rollout not finished is
dropped past `max_rollouts` (the oldest first).
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..errors import AutoRLError
from ..model import Model
from ..serving.auth import RequireKey, bearer, new_key
from ..trajectories import Trajectory
from .completions import chat_request, recorded_choice

ROLLOUT_HEADER = "X-Autorl-Rollout"
"""The header that names a rollout on `/v1/chat/completions` (for an agent whose base URL cannot change)."""


@dataclass(frozen=True)
class GatewayRollout:
    """One rollout's address on a gateway: what an agent needs to have its calls recorded."""

    id: str
    base_url: str
    """The agent's OpenAI base URL (`.../rollouts/<id>/v1`)."""
    api_key: str
    """The gateway's key, the agent's OpenAI API key (held in memory, never written)."""

    def env(self) -> dict[str, str]:
        """The environment an OpenAI SDK reads (`OPENAI_BASE_URL`, `OPENAI_API_KEY`): give it to the agent's
        process."""
        return {"OPENAI_BASE_URL": self.base_url, "OPENAI_API_KEY": self.api_key}


class CaptureGateway:
    """Records the chat completions of agents that are not Python (or not run in this process) into trajectories,
    one per rollout id, passing each on to `model` (a registered `TrainableModel`'s requests wait while it trains)."""

    def __init__(
        self, model: Model, *, host: str = "127.0.0.1", port: int = 0, max_body_bytes: int = 4 * 2**20,
        max_rollouts: int = 4096,
    ) -> None:  # fmt: skip
        self.model, self.host, self.port = model, host, port
        self.max_body_bytes, self.max_rollouts = max_body_bytes, max_rollouts
        self.key = new_key()
        self.url = ""
        self._rollouts: dict[str, Trajectory] = {}
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task | None = None

    def app(self) -> Any:
        """The gateway's ASGI app: its three routes behind the key."""
        app = Starlette(
            routes=[
                Route("/rollouts/{rollout}/v1/chat/completions", self._complete, methods=["POST"]),
                Route("/v1/chat/completions", self._complete, methods=["POST"]),
                Route("/rollouts/{rollout}/reward", self._reward, methods=["POST"]),
            ]
        )
        app.add_middleware(RequireKey, key=self.key)
        return app

    async def __aenter__(self) -> CaptureGateway:
        config = uvicorn.Config(self.app(), host=self.host, port=self.port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                raise AutoRLError(f"the capture gateway could not listen on {self.host}:{self.port}")
            await asyncio.sleep(0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://{self.host}:{port}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task

    def rollout(self) -> GatewayRollout:
        """A new rollout: its id, base URL and key; its trajectory fills as the agent calls."""
        rollout_id = secrets.token_hex(12)
        if len(self._rollouts) >= self.max_rollouts:
            self._rollouts.pop(next(iter(self._rollouts)))
        self._rollouts[rollout_id] = Trajectory()
        return GatewayRollout(rollout_id, f"{self.url}/rollouts/{rollout_id}/v1", self.key)

    def finish(self, rollout_id: str) -> Trajectory:
        """The rollout's trajectory (its calls, the reward and metrics posted), no longer recorded into."""
        trajectory = self._rollouts.pop(rollout_id, None)
        if trajectory is None:
            raise AutoRLError(f"the capture gateway has no rollout {rollout_id!r} (finished already, or never made)")
        return trajectory.finish()

    async def _body(self, request: Request) -> bytes | Response:
        """The request's body, or the answer that refuses it (over the limit, or not for a known rollout)."""
        rollout = request.path_params.get("rollout") or request.headers.get(ROLLOUT_HEADER, "")
        if rollout not in self._rollouts:
            return JSONResponse({"error": f"no rollout {rollout[:40]!r} on this gateway"}, status_code=404)
        over = JSONResponse({"error": f"request body over {self.max_body_bytes} bytes"}, status_code=413)
        length = request.headers.get("content-length", "0")
        if not length.isdigit() or int(length) > self.max_body_bytes:  # refused before a byte is read
            return over
        body = bytearray()
        try:
            async for chunk in request.stream():  # a body without a length (chunked) is counted as it arrives
                body += chunk
                if len(body) > self.max_body_bytes:
                    return over
        except ClientDisconnect:
            return Response(status_code=400)  # the agent is gone: nobody reads this
        return bytes(body)

    async def _complete(self, request: Request) -> Response:
        raw = await self._body(request)
        if isinstance(raw, Response):
            return raw
        body = chat_request("POST", request.url.path, raw)
        if body is None:
            return JSONResponse({"error": "not a chat completion request (JSON with `messages`)"}, status_code=400)
        body["model"] = self.model.get_inference_name()
        rollout = request.path_params.get("rollout") or request.headers[ROLLOUT_HEADER]
        client = self.model.http_client()
        url, headers = (
            f"{self.model.require_endpoint()}/chat/completions",
            bearer(self.model.inference_api_key or "none"),
        )
        try:
            answer = await client.send(client.build_request("POST", url, json=body, headers=headers), stream=True)
        except httpx.HTTPError as exc:
            await client.aclose()
            return JSONResponse({"error": f"the model {self.model.name!r} did not answer: {exc!r}"[:400]}, 502)

        async def relay() -> AsyncIterator[bytes]:
            """The answer's bytes as they arrive (a stream reaches the agent token by token); recorded at its end."""
            received = bytearray()
            try:
                async for chunk in answer.aiter_bytes():
                    received += chunk
                    yield chunk
            finally:
                await answer.aclose()
                await client.aclose()
            trajectory = self._rollouts.get(rollout)
            choice = recorded_choice(bytes(received), streamed=bool(body.get("stream"))) if answer.is_success else None
            if trajectory is not None and choice is not None:
                trajectory.add_completion(body["messages"], body.get("tools"), choice)

        media = answer.headers.get("content-type", "application/json")
        return StreamingResponse(relay(), status_code=answer.status_code, media_type=media)

    async def _reward(self, request: Request) -> Response:
        raw = await self._body(request)
        if isinstance(raw, Response):
            return raw
        try:
            posted = Reward.model_validate_json(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "body"
            return JSONResponse(
                {"error": f"a reward is {{'reward': number, 'metrics': {{...}}}}: {where}: {first['msg']}"[:400]}, 400
            )
        trajectory = self._rollouts[request.path_params["rollout"]]
        trajectory.reward = posted.reward
        trajectory.metrics.update(posted.metrics)
        return JSONResponse({"reward": trajectory.reward})


def post_reward(
    reward: float, metrics: dict[str, float] | None = None, *, base_url: str | None = None, api_key: str | None = None
) -> None:
    """Ends a rollout from the agent's side (a Python agent in its own process): posts its reward and metrics to
    the gateway rollout whose address it was given, by default the `OPENAI_BASE_URL` and `OPENAI_API_KEY` of
    `GatewayRollout.env()`; a refusal is one `AutoRLError` line."""
    base_url = base_url or os.environ.get("OPENAI_BASE_URL", "")
    api_key = api_key or os.environ.get("OPENAI_API_KEY", "")
    if not base_url.rstrip("/").endswith("/v1") or "/rollouts/" not in base_url:
        raise AutoRLError(f"post_reward: {base_url!r} is no capture gateway rollout address (.../rollouts/<id>/v1)")
    answer = httpx.post(
        f"{base_url.rstrip('/').removesuffix('/v1')}/reward",
        json={"reward": reward, "metrics": metrics or {}},
        headers=bearer(api_key),
        timeout=30,
    )
    if not answer.is_success:
        raise AutoRLError(f"post_reward: the gateway answered {answer.status_code}: {answer.text[:200]}")


class Reward(BaseModel):
    """What `POST /rollouts/<id>/reward` takes."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    reward: float
    metrics: dict[str, float] = Field(default_factory=dict)
