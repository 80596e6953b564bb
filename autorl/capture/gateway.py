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
`post_reward`); `POST /rollouts` opens a rollout (`{"id", "path"}`). Nothing else is served. The gateway binds
127.0.0.1 unless told otherwise, its key is made per gateway and never written, ids are random (`any_id`: an
agent's own name opens a rollout on its first call, as `autorl capture` lets it), a body is at most
`max_body_bytes` (a longer declared length is refused before a byte is read), a request that is not a chat
completion (messages with roles, tools a list of objects) is a 400 and reaches no model, what a request asks of the model is bounded by `limits` (answer tokens, choices, requests at
once: `ServeLimits.check_ask`), and what the rollouts hold is bounded (`Rollouts`: `max_rollouts` open at once,
calls and bytes per rollout and in all; past one a call or an opening is a 413 or 429 with one line, and no
rollout is dropped unwritten).
`autorl serve` has the same routes under each model (`autorl.backends.remote.rollouts`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..backends.remote.app import BodyLimit
from ..backends.remote.limits import Concurrency, ServeLimits
from ..errors import AutoRLError
from ..model import Model
from ..serving.auth import RequireKey, bearer, new_key
from ..trajectories import Trajectory
from .completions import chat_request
from .rollouts import (
    MAX_OPEN_ROLLOUTS,
    ROLLOUT_HEADER,
    ROLLOUT_ID,
    GatewayRollout,
    OpenedRollout,
    Reward,
    RolloutRefused,
    Rollouts,
    recording,
)


class CaptureGateway:
    """Records the chat completions of agents that are not Python (or not run in this process) into trajectories,
    one per rollout id, passing each on to `model` (a registered `TrainableModel`'s requests wait while it trains).

    on_reward: called with a rollout's id and trajectory when its reward is posted, which then finishes it (as
        `autorl capture` writes each one); None: the rollout stays open until `finish`.
    any_id: a rollout id the gateway did not make (`ROLLOUT_ID`: letters, digits, `_.-`) opens a rollout on its
        first call, so an agent picks its own; False: only `rollout()` or `POST /rollouts` open one.
    key: the key every route needs; None: a new one (`self.key`)."""

    def __init__(
        self, model: Model, *, host: str = "127.0.0.1", port: int = 0, max_body_bytes: int = 4 * 2**20,
        max_rollouts: int = MAX_OPEN_ROLLOUTS, limits: ServeLimits | None = None,
        on_reward: Callable[[str, Trajectory], None] | None = None, any_id: bool = False, key: str | None = None,
    ) -> None:  # fmt: skip
        self.model, self.host, self.port = model, host, port
        self.max_body_bytes, self.limits = max_body_bytes, limits or ServeLimits()
        self.on_reward, self.any_id = on_reward, any_id
        self.key = key or new_key()
        self.url = ""
        self.rollouts = Rollouts(max_rollouts)
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task | None = None

    def app(self) -> Any:
        """The gateway's ASGI app: its routes behind the key, the body limit and the bound on requests at once."""
        app = Starlette(
            routes=[
                Route("/rollouts", self._open, methods=["POST"]),
                Route("/rollouts/{rollout}/v1/chat/completions", self._complete, methods=["POST"]),
                Route("/v1/chat/completions", self._complete, methods=["POST"]),
                Route("/rollouts/{rollout}/reward", self._reward, methods=["POST"]),
            ],
            exception_handlers={HTTPException: refused},
        )
        app.add_middleware(BodyLimit, max_bytes=self.max_body_bytes)
        app.add_middleware(Concurrency, limit=self.limits.max_concurrent_requests)
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

    def rollout(self, rollout_id: str | None = None) -> GatewayRollout:
        """A new rollout (`rollout_id`, a random one when None): its id, base URL and key; its trajectory fills as
        the agent calls."""
        rollout_id = self.rollouts.open(rollout_id)
        return GatewayRollout(rollout_id, f"{self.url}/rollouts/{rollout_id}/v1", self.key)

    def finish(self, rollout_id: str) -> Trajectory:
        """The rollout's trajectory (its calls, the reward and metrics posted), no longer recorded into."""
        trajectory = self.rollouts.finish(rollout_id)
        if trajectory is None:
            raise AutoRLError(f"the capture gateway has no rollout {rollout_id!r} (finished already, or never made)")
        return trajectory

    def _rollout(self, request: Request) -> tuple[str, Trajectory] | Response:
        """The rollout a request names and its trajectory (opened now when `any_id` lets it), or the 404 that
        refuses it."""
        rollout = request.path_params.get("rollout") or request.headers.get(ROLLOUT_HEADER, "")
        if (trajectory := self.rollouts.get(rollout)) is None:
            if not (self.any_id and ROLLOUT_ID.fullmatch(rollout)):
                return JSONResponse({"error": f"no rollout {rollout[:40]!r} on this gateway"}, status_code=404)
            try:
                trajectory = self.rollouts.get(self.rollouts.open(rollout))
            except RolloutRefused as exc:
                return JSONResponse({"error": str(exc)}, status_code=exc.status)
        return rollout, trajectory

    async def _open(self, _: Request) -> Response:
        try:
            rollout = self.rollout()
        except RolloutRefused as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.status)
        return JSONResponse(OpenedRollout(id=rollout.id, path=f"/rollouts/{rollout.id}/v1").model_dump())

    async def _complete(self, request: Request) -> Response:
        found = self._rollout(request)
        if isinstance(found, Response):
            return found
        rollout = found[0]
        body = chat_request("POST", request.url.path, await request.body())
        if body is None:
            return JSONResponse({"error": "not a chat completion request (JSON with `messages`)"}, status_code=400)
        if (why := self.limits.check_ask(body, "autorl capture")) is not None:
            return JSONResponse({"error": why}, status_code=400)
        try:
            self.rollouts.admit(rollout)
        except RolloutRefused as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.status)
        body["model"] = self.model.get_inference_name()
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

        async def relay() -> Any:
            try:
                record = self.rollouts.recorder(rollout, "", body, answer.is_success)
                async for chunk in recording(answer.aiter_bytes(), "", record):
                    yield chunk
            finally:
                await answer.aclose()
                await client.aclose()

        media = answer.headers.get("content-type", "application/json")
        return StreamingResponse(relay(), status_code=answer.status_code, media_type=media)

    async def _reward(self, request: Request) -> Response:
        found = self._rollout(request)
        if isinstance(found, Response):
            return found
        rollout, trajectory = found
        try:
            posted = Reward.model_validate_json(await request.body())
        except ValueError as exc:
            return JSONResponse({"error": f"a reward is {{'reward': number, 'metrics': {{...}}}}: {exc}"[:400]}, 400)
        posted.apply(trajectory)
        if self.on_reward is not None:
            self.on_reward(rollout, self.finish(rollout))
        return JSONResponse({"reward": posted.reward})


async def refused(_: Request, exc: Exception) -> Response:
    """A request the body limit refused, as every other refusal: `{"error": "<one line>"}`."""
    assert isinstance(exc, HTTPException)
    return JSONResponse({"error": exc.detail}, status_code=exc.status_code)


def post_reward(
    reward: float, metrics: dict[str, float] | None = None, *, base_url: str | None = None, api_key: str | None = None
) -> None:
    """Ends a rollout from the agent's side (a Python agent in its own process): posts its reward and metrics to
    the gateway rollout whose address it was given, by default the `OPENAI_BASE_URL` and `OPENAI_API_KEY` of
    `GatewayRollout.env()` (a `CaptureGateway`, `autorl capture` or `autorl serve`); a refusal is one
    `AutoRLError` line."""
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
