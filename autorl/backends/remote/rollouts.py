"""The capture gateway on `autorl serve` (`autorl.capture`): a rollout address per id under each served model, so an
agent in any language, on any machine that reaches the server, has its calls recorded into a trajectory that
the training program fetches (`RemoteBackend.capture_rollout` / `finish_rollout`). app.py registers the routes:

    POST /models/NAME/rollouts                          open a rollout: {"id", "path"} (`OpenedRollout`)
    POST /models/NAME/rollouts/ID/v1/chat/completions   the agent's chat completion, passed on to NAME's newest
                                                        checkpoint as /v1/chat/completions is, recorded once complete
    POST /models/NAME/rollouts/ID/reward                {"reward": R, "metrics": {...}} (`Reward`)
    POST /models/NAME/rollouts/ID/finish                the trajectory recorded (`FinishedRollout`); the rollout ends
    POST /v1/chat/completions, X-Autorl-Rollout: ID     the same as the second, for an agent whose base URL stays /v1

Each needs the server's token, counts against `--max-concurrent-requests` and reaches the model's vLLM server on
`/v1/chat/completions` only; what an agent asks is bounded by the server's `ServeLimits` (`check_ask`), as on `/v1`,
and what the rollouts hold by `Rollouts`' bounds (open rollouts, calls and bytes: 413 or 429 past one).
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from ...capture.rollouts import FinishedRollout, OpenedRollout, Reward, RolloutRefused, Rollouts, recording
from ...errors import quoted
from ...trajectories import Trajectory
from .served import Refused, ServedModels

CHAT_ROUTE = "/v1/chat/completions"
"""The one route of a model's server that a rollout's calls reach."""


class ServedRollouts:
    """The open rollouts of `autorl serve`, each under the model it was opened for."""

    def __init__(self, served: ServedModels):
        self.served = served
        self.rollouts = Rollouts()

    async def open(self, name: str) -> OpenedRollout:
        await self.served.get(name)  # 404 for a model not served here
        try:
            rollout = self.rollouts.open(model=name)
        except RolloutRefused as exc:
            raise Refused(exc.status, str(exc)) from None
        return OpenedRollout(id=rollout, path=f"/models/{name}/rollouts/{rollout}/v1")

    def trajectory(self, name: str | None, rollout: str) -> tuple[str, Trajectory]:
        """The model and trajectory of rollout `rollout` (of model `name`; None: whichever it is of); 404 when
        there is none."""
        name = self.rollouts.owner(rollout) if name is None else name
        trajectory = None if name is None else self.rollouts.get(rollout, name)
        if name is None or trajectory is None:
            raise missing(rollout)
        return name, trajectory

    async def complete(self, request: Request, name: str | None, rollout: str, body: dict) -> Response:
        """The agent's chat completion passed on to the rollout's model (its newest checkpoint, whatever model
        the agent names), relayed as it comes, its first choice recorded into the rollout once complete."""
        name, _ = self.trajectory(name, rollout)
        if not isinstance(body.get("messages"), list):
            raise Refused(400, f"{CHAT_ROUTE} needs a JSON object with a list of messages")
        try:
            self.rollouts.admit(rollout)
        except RolloutRefused as exc:
            raise Refused(exc.status, str(exc)) from None
        answer = await self.served.forward(request, CHAT_ROUTE, {**body, "model": name})
        if not isinstance(answer, StreamingResponse):  # forward streams every answer; anything else is not recorded
            return answer
        record = self.rollouts.recorder(rollout, name, body, 200 <= answer.status_code < 300)
        answer.body_iterator = recording(answer.body_iterator, answer.headers.get("content-encoding", ""), record)
        return answer

    def reward(self, name: str, rollout: str, posted: Reward) -> dict:
        return {"reward": posted.apply(self.trajectory(name, rollout)[1])}

    def finish(self, name: str, rollout: str) -> FinishedRollout:
        if (trajectory := self.rollouts.finish(rollout, name)) is None:
            raise missing(rollout)
        return FinishedRollout(trajectory=trajectory)


def missing(rollout: str) -> Refused:
    return Refused(404, f"no rollout {quoted(rollout)} open here (POST /models/NAME/rollouts opens one)")
