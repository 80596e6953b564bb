"""The HTTP app of `autorl serve`: a `LocalBackend`'s models, trained and served for `autorl.RemoteBackend` clients.

Paths (every one but /health needs the token; bodies are wire.py's request models):

    GET  /health                               the server runs
    POST /models                               register (serve) a model; its newest checkpoint if it has one
    GET  /models/NAME/step                     the newest trained step
    POST /models/NAME/train                    one GRPO step (one client at a time per model; a step id
                                               already trained is answered from the record)
    POST /models/NAME/log                      an evaluation batch (Model.log)
    POST /models/NAME/delete_checkpoints       the checkpoints a keep policy leaves out
    POST /models/NAME/serve                    serve checkpoint STEP (Backend.serve_checkpoint)
    POST /models/NAME/release                  this client is done training NAME (another may start)
    GET  /models/NAME/checkpoints[/STEP]       the complete checkpoints; one's PEFT files as .tar.gz
    GET  /models/NAME/history                  the training history (a record per step, as history.jsonl);
                                               these reads start no vLLM server, even after a restart
    GET  /models/NAME/trajectories             what Model.log recorded (SPLIT/NNNN.parquet, ART's files) as .tar.gz
    GET  /v1/models                            the names servable here: "NAME" is the newest checkpoint,
                                               "NAME@NNNN" checkpoint NNNN
    POST /v1/chat/completions, /v1/completions OpenAI-compatible inference, passed on to the model's vLLM
                                               server; every other /v1 path is 404 before anything is sent
                                               on (`autorl.serving.routes`: vLLM's LoRA loading and
                                               development endpoints are never reachable from here);
                                               answer tokens and choices bounded (`ServeLimits.check_ask`)
    POST /models/NAME/rollouts[/ID/...]        the capture gateway: an agent's calls recorded by rollout id
                                               (rollouts.py; with X-Autorl-Rollout: ID, /v1/chat/completions too)

What the server holds, and how a model is registered, trained and served, is `ServedModels`' (served.py);
this module reads the requests (bodies up to a size, gzip or not) and answers them. A bad request is a 4xx
whose body is `{"error": "<one line>"}`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import zlib
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypeVar

from fastapi import FastAPI, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.exceptions import HTTPException

from ruler.errors import RulerError

from ...capture.rollouts import ROLLOUT_HEADER, FinishedRollout, OpenedRollout, Reward
from ...errors import AutoRLError, ServerDiedError, quoted
from ...serving.auth import RequireKey
from ...serving.routes import INFERENCE_ROUTES, allowed_route
from ...training.checkpoints import checkpoint_name, complete_checkpoints
from ..base import inference_name
from ..run_dir import read_history
from .limits import Concurrency, ServeLimits
from .openapi import request_body
from .rollouts import CHAT_ROUTE, ServedRollouts
from .served import Refused, ServedModels, checkpoint_archive, trajectories_archive
from .wire import (
    CLIENT_HEADER,
    MAX_STEP,
    DeleteRequest,
    LogRequest,
    Registered,
    RegisterRequest,
    ServeRequest,
    Trained,
    TrainRequest,
    check_name,
    invalid_line,
)

log = logging.getLogger("autorl")
M = TypeVar("M", bound=BaseModel)
ROUTES = ", ".join(f"{' '.join(sorted(methods))} {route}" for route, methods in INFERENCE_ROUTES.items())
MAX_ERROR_CHARS = 400
"""The longest error line the server answers (a value is quoted by a short prefix: `autorl.errors.quoted`)."""


class OpenAIRequest(BaseModel):
    """What the /v1 routes read of an OpenAI request before passing it on: the model it names (the rest goes
    to vLLM as it is)."""

    model_config = ConfigDict(extra="allow")

    model: str


class BodyLimit:
    """ASGI middleware: a request body over `max_bytes` is refused with 413, by its Content-Length before it
    is read, or as soon as the bytes read pass the limit."""

    def __init__(self, app: Any, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    def message(self) -> str:
        return f"request body over {self.max_bytes / 2**20:g} MiB; send fewer groups per step or raise `autorl serve --max-body-mb`"

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            response = JSONResponse({"error": self.message()}, status_code=413)
            return await response(scope, receive, send)
        seen = 0

        async def limited() -> Any:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise HTTPException(413, self.message())
            return message

        return await self.app(scope, limited, send)


async def parsed(request: Request, kind: type[M], max_bytes: int, limits: ServeLimits) -> M:
    """The request's body (gzip or not) as a `kind`; a bad one is a `ValidationError` (400), one past a bound of
    `limits` on its shape a 400 (`ServeLimits.check_body`). A gzip body is inflated as it arrives, and refused
    (413) as soon as it inflates past `max_bytes`. It is parsed on a thread: the server answers meanwhile."""
    raw = await inflated(request, max_bytes)
    return await asyncio.to_thread(validated, kind, raw, limits)


async def inflated(request: Request, max_bytes: int) -> bytes:
    """The request's body, a gzip body inflated as it arrives (413 as soon as it passes `max_bytes`)."""
    if request.headers.get("content-encoding", "").lower() != "gzip":
        return await request.body()
    inflater, raw = zlib.decompressobj(wbits=31), bytearray()
    try:
        async for chunk in request.stream():
            raw += inflater.decompress(chunk, max_bytes + 1 - len(raw))  # at most one byte past the limit
            if len(raw) > max_bytes:
                raise Refused(
                    413, f"the gzip body inflates past {max_bytes / 2**20:g} MiB (autorl serve --max-body-mb)"
                )
        if not inflater.eof:
            raise Refused(400, "the gzip body could not be read (it ends early)")
    except zlib.error as exc:
        raise Refused(400, f"the gzip body could not be read ({exc})") from None
    return bytes(raw)


def validated(kind: type[M], raw: bytes, limits: ServeLimits) -> M:
    """`raw` JSON as a `kind`: a 400 when its shape passes a bound of `limits` (before it is built), a
    `ValidationError`, or a 400 when a model's own code refuses a value's type."""
    if (why := limits.check_body(raw)) is not None:
        raise Refused(400, why)
    try:
        return kind.model_validate_json(raw or b"{}")
    except ValidationError:
        raise
    except (TypeError, ValueError, AttributeError) as exc:  # e.g. a TrajectoryGroup given a number
        raise Refused(400, f"the body is not a {kind.__name__} ({quoted(str(exc), 120)})") from None


def json_object(raw: bytes, route: str) -> dict:
    """An inference request's body: a JSON object, else a 400 naming `route`."""
    try:
        body = json.loads(raw or b"null")
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        raise Refused(400, f"{route}: the body is not JSON") from None
    if not isinstance(body, dict):
        raise Refused(400, f"{route} needs a JSON object")
    return body


def error(status: int, message: str) -> JSONResponse:
    line = " ".join(str(message).split())
    return JSONResponse({"error": line if len(line) <= MAX_ERROR_CHARS else line[:MAX_ERROR_CHARS] + "..."}, status)


def make_app(served: ServedModels, token: str, max_body_bytes: int) -> FastAPI:
    """The server's app over `served`: the token required on every path but /health, bodies up to
    `max_body_bytes`, at most `served.limits.max_concurrent_requests` requests at once."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await served.close()
            await asyncio.to_thread(served.backend.close)  # stops the models' vLLM servers

    app = FastAPI(title="autorl serve", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)

    @app.exception_handler(Refused)
    async def refused(_: Request, exc: Refused) -> JSONResponse:
        return error(exc.status, str(exc))

    @app.exception_handler(ValidationError)
    async def invalid(_: Request, exc: ValidationError) -> JSONResponse:
        return error(400, invalid_line(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        return error(400, f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}")

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return error(exc.status_code, exc.detail)

    @app.exception_handler(ServerDiedError)
    async def died(_: Request, exc: ServerDiedError) -> JSONResponse:
        return error(503, str(exc))

    @app.exception_handler(AutoRLError)
    @app.exception_handler(RulerError)
    async def user_error(_: Request, exc: Exception) -> JSONResponse:
        return error(400, str(exc))

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        incident = secrets.token_hex(6)  # what the client gets: the log has the rest, the client no path or value
        log.error("autorl serve: unexpected error %s: %s", incident, exc, exc_info=exc)
        return error(500, f"internal error {incident}: the server's log says what happened")

    def client_of(request: Request) -> str:
        client = request.headers.get(CLIENT_HEADER, "")
        if not 8 <= len(client) <= 64:
            raise Refused(400, f"a training request needs its client's id ({CLIENT_HEADER}: 8-64 characters)")
        return client

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.post("/models", openapi_extra=request_body(RegisterRequest))
    async def register(request: Request) -> Registered:
        body = await parsed(request, RegisterRequest, max_body_bytes, served.limits)
        return await served.register(body, request.headers.get(CLIENT_HEADER, "")[:64])

    @app.get("/models/{name}/step")
    async def step(name: str) -> dict:
        return {"step": await served.backend.get_step(await served.get(name))}

    @app.post("/models/{name}/train", openapi_extra=request_body(TrainRequest))
    async def train(name: str, request: Request) -> Trained:
        client = client_of(request)
        body = await parsed(request, TrainRequest, max_body_bytes, served.limits)
        served.check_limits(body)
        return await served.train(name, body, client)

    @app.post("/models/{name}/release")
    async def release(name: str, request: Request) -> dict:
        served.release(name, client_of(request))
        return {"released": name}

    @app.post("/models/{name}/log", openapi_extra=request_body(LogRequest))
    async def log_batch(name: str, request: Request) -> dict:
        body = await parsed(request, LogRequest, max_body_bytes, served.limits)
        served.check_limits(body)
        return await served.log(check_name(name), body, request.headers.get(CLIENT_HEADER, "")[:64])

    @app.post("/models/{name}/delete_checkpoints", openapi_extra=request_body(DeleteRequest))
    async def delete_checkpoints(name: str, request: Request) -> dict:
        body = await parsed(request, DeleteRequest, max_body_bytes, served.limits)
        model = await served.get(name)
        served.check_lease(name, client_of(request))
        return {"deleted": await served.backend.delete_checkpoints(model, body.best_checkpoint_metric, body.keep)}

    @app.post("/models/{name}/serve", openapi_extra=request_body(ServeRequest))
    async def serve_step(name: str, request: Request) -> Registered:
        body = await parsed(request, ServeRequest, max_body_bytes, served.limits)
        model = await served.get(name)
        await served.serve(model, body.step)
        return Registered(step=body.step, inference_name=inference_name(name, body.step))

    @app.get("/models/{name}/checkpoints")
    async def checkpoints(name: str) -> dict:
        run_dir = served.backend.run_dir(served.recorded(name))
        return {"steps": [step for step, _ in complete_checkpoints(run_dir / "checkpoints")]}

    @app.get("/models/{name}/history")
    async def history(name: str) -> dict:
        return {"history": read_history(served.backend.run_dir(served.recorded(name)))}

    @app.get("/models/{name}/checkpoints/{step}")
    async def checkpoint(name: str, step: Annotated[int, Path(ge=1, le=MAX_STEP)]) -> Response:
        checkpoints = served.backend.run_dir(served.recorded(name)) / "checkpoints"
        archive = await asyncio.to_thread(checkpoint_archive, checkpoints, name, step)
        filename = f"{name}-{checkpoint_name(step)}.tar.gz"
        return Response(
            archive,
            media_type="application/gzip",
            headers={"Content-Disposition": f'attachment; filename="{filename}"'},
        )

    @app.get("/models/{name}/trajectories")
    async def trajectories(name: str) -> Response:
        run_dir = served.backend.run_dir(served.recorded(name))
        archive = await asyncio.to_thread(trajectories_archive, run_dir)
        return Response(archive, media_type="application/gzip")

    @app.get("/v1/models")
    async def models() -> dict:
        names = [n for model in served.models.values() for n in served.servable(model)]
        return {"object": "list", "data": [{"id": n, "object": "model", "owned_by": "autorl"} for n in names]}

    @app.post("/v1/{path:path}", openapi_extra=request_body(OpenAIRequest))
    async def inference(path: str, request: Request) -> Response:
        route = allowed_route(request.method, request.scope.get("raw_path", b"").decode("latin-1") or path)
        if route is None:  # before the body is read: nothing but INFERENCE_ROUTES reaches vLLM
            raise Refused(404, f"not an inference route: {quoted('/v1/' + path)} (this server passes on {ROUTES})")
        body = json_object(await request.body(), route)
        if (rollout := request.headers.get(ROLLOUT_HEADER)) is not None:
            if route != CHAT_ROUTE:
                raise Refused(400, f"{ROLLOUT_HEADER} is read on {CHAT_ROUTE} only")
            return await rollouts.complete(request, None, rollout, body)
        return await served.forward(request, route, body)

    rollouts = ServedRollouts(served)

    @app.post("/models/{name}/rollouts")
    async def open_rollout(name: str) -> OpenedRollout:
        return await rollouts.open(name)

    @app.post("/models/{name}/rollouts/{rollout}/v1/chat/completions", openapi_extra=request_body(OpenAIRequest))
    async def rollout_completion(name: str, rollout: str, request: Request) -> Response:
        body = json_object(await inflated(request, max_body_bytes), CHAT_ROUTE)
        return await rollouts.complete(request, name, rollout, body)

    @app.post("/models/{name}/rollouts/{rollout}/reward", openapi_extra=request_body(Reward))
    async def rollout_reward(name: str, rollout: str, request: Request) -> dict:
        return rollouts.reward(name, rollout, await parsed(request, Reward, max_body_bytes, served.limits))

    @app.post("/models/{name}/rollouts/{rollout}/finish")
    async def finish_rollout(name: str, rollout: str) -> FinishedRollout:
        return rollouts.finish(name, rollout)

    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    app.add_middleware(Concurrency, limit=served.limits.max_concurrent_requests)
    app.add_middleware(RequireKey, key=token)  # added last: the outermost, before anything reads the body
    return app
