"""The `autorl capture` command (`pipelines.cli` registers it): `autorl.capture.command`'s gateway from a shell."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from autorl.backends.remote.limits import ServeLimits
from autorl.capture.command import capture, gateway_key, upstream
from autorl.serving.config import LOOPBACK_HOSTS
from ruler.endpoint import ModelEndpoint

from .cli_base import USER_ERRORS, err, fail, run_async

LIMIT = ServeLimits.model_fields


def capture_command(
    model: Annotated[
        str,
        typer.Argument(
            metavar="NAME@URL",
            help="The model the agents' chat completions go to: NAME on the OpenAI-compatible server at URL "
            "(a vLLM server, a provider's API, `autorl serve`'s URL/v1).",
        ),
    ],
    out: Annotated[Path, typer.Option(help="The JSON Lines file each rollout's trajectory is appended to.")],
    api_key_env: Annotated[
        str | None,
        typer.Option(
            metavar="VAR",
            help="The variable holding the model server's key (AUTORL_TOKEN for `autorl serve`); sent to it only.",
        ),
    ] = None,
    key_env: Annotated[
        str | None,
        typer.Option(
            metavar="VAR",
            help="The variable holding the key agents must send; default: a new key, printed once on stdout.",
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="The interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="The port; 0: a free one.")] = 0,
    max_concurrent_requests: Annotated[
        int, typer.Option(min=1, help="Requests at once; one more is answered 503.")
    ] = LIMIT["max_concurrent_requests"].default,
    max_client_model_len: Annotated[
        int, typer.Option(min=1, help="Most answer tokens a request may ask for (max_tokens).")
    ] = LIMIT["max_client_model_len"].default,
    max_num_seqs: Annotated[int, typer.Option(min=1, help="Most choices a request may ask for (n).")] = LIMIT[
        "max_num_seqs"
    ].default,
) -> None:
    """Record the chat completions of agents in any language: a gateway on this machine in front of a model,
    passing each call on and appending each rollout's trajectory to --out.

    An agent uses the printed OPENAI_BASE_URL and OPENAI_API_KEY, with its own rollout id in place of "1" in
    the URL (letters, digits, _.-), and ends the rollout with POST {"reward": R, "metrics": {...}} to
    .../rollouts/ID/reward: its trajectory is then appended to --out, one JSON line
    (`autorl.Trajectory.model_validate_json`). Rollouts without a reward are written when the gateway stops
    (Ctrl-C), with metadata reward_posted false. Every route needs the key; loopback unless --host says otherwise.
    """

    def announce(line: str) -> None:
        if line.startswith("OPENAI_API_KEY="):  # the one line the user needs the key on: past the redaction
            sys.__stdout__.write(line + "\n")
            sys.__stdout__.flush()
        else:
            print(line, flush=True)

    try:
        spec = ModelEndpoint.parse(model)
        if spec.base_url is None:
            fail(f"{model!r}: autorl capture needs NAME@URL, a model on an OpenAI-compatible server")
        limits = ServeLimits(
            max_concurrent_requests=max_concurrent_requests,
            max_client_model_len=max_client_model_len,
            max_num_seqs=max_num_seqs,
        )
        key = gateway_key(key_env)
        if host not in LOOPBACK_HOSTS:
            err.print(f"warning: --host {host} is not loopback: the key and every call travel in clear", markup=False)
        run_async(
            capture(upstream(spec.model, spec.base_url, api_key_env), out, announce, host=host, port=port,
                    limits=limits, key=key)
        )  # fmt: skip
    except USER_ERRORS as exc:
        fail(str(exc))
    except KeyboardInterrupt:  # Ctrl-C is how it stops: the open rollouts were written
        return
