"""The routes of a vLLM server that a proxy of autorl's passes on for others: OpenAI inference, nothing else.

vLLM answers far more than inference: runtime LoRA loading (`/v1/load_lora_adapter` loads any path or hub
name), and in merged serving its development endpoints (`/collective_rpc` calls any worker method by name,
`/pause`, `/sleep`, ...). Those are autorl's own tools; a client of `autorl serve` or of a cluster's pool proxy
gets `INFERENCE_ROUTES` only, so a route vLLM adds later is not exposed by default.

A path is matched as the server it is passed to would read it (`normalised`): percent-decoding repeated
until nothing changes (`%2e%2e`, `%252e`), backslashes read as slashes, empty and `.` segments dropped, `..`
resolved; a path that climbs above the root, or holds a control character, matches nothing, nor does a
request target with a '#' (a fragment, which a client never sends). What is sent on
is the allowlisted route itself, never the client's spelling of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import unquote

INFERENCE_ROUTES: Mapping[str, frozenset[str]] = {
    "/v1/chat/completions": frozenset({"POST"}),
    "/v1/completions": frozenset({"POST"}),
    "/v1/models": frozenset({"GET"}),
}
"""What an OpenAI-compatible client of a policy needs, by method: chat and text completions (the agent loop,
LiteLLM, DSPy, LangChain; `prompt_logprobs` scoring is a completion) and the model list (clients that check a
name first). Embeddings, audio, responses and every non-/v1 path stay closed."""
MAX_DECODES = 4
"""Rounds of percent-decoding tried; a path still encoded after them matches nothing."""


def normalised(path: str) -> str | None:
    """`path` (as sent: percent-encoded, without its query) decoded and with its dot segments resolved, as
    `/a/b`; None when it climbs above the root, holds a control character or stays encoded past `MAX_DECODES`."""
    for _ in range(MAX_DECODES):
        decoded = unquote(path, errors="strict") if "%" in path else path
        if decoded == path:
            break
        path = decoded
    else:
        return None
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in path):
        return None
    parts: list[str] = []
    for segment in path.replace("\\", "/").split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if not parts:
                return None
            parts.pop()
        else:
            parts.append(segment)
    return "/" + "/".join(parts)


def allowed_route(method: str, path: str, routes: Mapping[str, frozenset[str]] = INFERENCE_ROUTES) -> str | None:
    """The route of `routes` that `method path` names (the path as sent, percent-encoded), or None: what a
    proxy sends on instead of the client's path."""
    if "#" in path:  # a fragment is never sent; one in a request target is a spelling servers read differently
        return None
    try:
        route = normalised(path.partition("?")[0])
    except UnicodeDecodeError:
        return None
    return route if route is not None and method.upper() in routes.get(route, ()) else None
