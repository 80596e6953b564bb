"""The embedded judge and generator on a Ray cluster: `ClusterBackend` serves the embedded model's plain weights
on `judge_replicas` vLLM replica actors behind a local `PoolProxy`, and `embedded_endpoint` (which RULER's
judge and the input generator resolve "embedded" with) points there instead of starting a server here.

One local cluster with two such replicas (no policy registered: nothing else starts): a generator call, RULER
groups (the judge's way), concurrent LiteLLM calls and a streamed request go through the proxy; both replicas
answer some (each server's own request counter); closing the backend leaves no vLLM process and no redirection
behind. A replica killed mid-request, resent and restarted, is tests/test_cluster_e2e.py's (the policy's
replicas: the same `ReplicaPool` and routing); the router's resend rules are tests/test_cluster_routing.py's.
"""

from __future__ import annotations

import asyncio
import os

import httpx
import pytest

from autorl.serving.vllm_server import VLLMServer
from autorl.trajectories import Trajectory, TrajectoryGroup
from ruler import ruler_score_group
from ruler.endpoint import ModelEndpoint, import_litellm
from tests.helpers.limits import scaled
from tests.helpers.processes import descendants, wait_gone, with_command_line
from tests.helpers.servers import vllm_metric

pytestmark = pytest.mark.slow
ray = pytest.importorskip("ray")

CHAT = [{"role": "user", "content": "Name a colour."}]


def answered_requests(replica) -> int:
    return vllm_metric(replica.url, "request_success_total", replica.key)


def group(answers: list[str]) -> TrajectoryGroup:
    return TrajectoryGroup(
        [
            Trajectory(messages_and_choices=[*CHAT, {"role": "assistant", "content": answer}], reward=0.0)
            for answer in answers
        ]
    )


async def judged(groups: list[TrajectoryGroup]) -> list[TrajectoryGroup | None]:
    """The groups scored at once by RULER with the embedded judge."""
    scoring = (ruler_score_group(g, "embedded", cache_dir=None, task="Name a colour") for g in groups)
    return await asyncio.wait_for(asyncio.gather(*scoring), 300)


async def completions(target, count: int) -> list[str]:
    """`count` concurrent chat calls of 48 tokens as RULER's judge makes them (LiteLLM), with no retry of its own."""
    litellm = import_litellm()

    async def one() -> str:
        response = await litellm.acompletion(
            **target.params(),
            messages=CHAT,
            max_tokens=48,
            extra_body={"min_tokens": 48},
            num_retries=0,
            max_retries=0,
            timeout=scaled(120),
        )
        return response.choices[0].message.content

    return await asyncio.gather(*(one() for _ in range(count)))


@pytest.mark.usefixtures("own_servers")  # looks at the processes the run started
@pytest.mark.timeout(480)  # ~180 s on 2 cores: two replica starts
def test_embedded_judge_and_generator_calls_spread_over_replicas_behind_one_keyed_proxy(tmp_path):
    from autorl.backends.cluster.backend import ClusterBackend
    from autorl.backends.cluster.config import ClusterConfig
    from autorl.inputs.generator import Generator
    from autorl.serving import embedded

    local_starts = VLLMServer.starts
    earlier = with_command_line(descendants(os.getpid()), b"vllm.entrypoints")  # an earlier test's, alive at exit
    backend = ClusterBackend(tmp_path, cluster=ClusterConfig(ray="local", replicas=1, judge_replicas=2))
    servers: set[int] = set()
    try:
        target = ModelEndpoint.parse("embedded").target()  # what the judge and the generator resolve
        assert target.api_base == backend.placement.embedded_proxy.base_url and target.api_base.startswith(
            "http://127.0.0.1:"
        )
        assert target.name == "embedded:smollm2-135m"
        assert VLLMServer.starts == local_starts and backend.remote_server_starts == 2  # none in this process
        servers = with_command_line(descendants(os.getpid()), b"vllm.entrypoints") - earlier
        pool = backend.placement.embedded_pool
        for replica in pool.replicas:  # each replica needs its own key, and the proxy its own
            assert replica.key and replica.key != target.api_key
            for path in ("/v1/models", "/metrics", "/tokenize", "/version"):
                assert httpx.get(f"{replica.url}{path}", timeout=10).status_code == 401, path
            assert httpx.get(f"{replica.url}/health", timeout=10).status_code == 200
        refused = httpx.post(f"{target.api_base}/chat/completions", json={"model": target.name, "messages": CHAT})
        assert refused.status_code == 401
        other_key = {"Authorization": f"Bearer {pool.replicas[0].key}"}  # a replica's key does not open the proxy
        assert httpx.get(f"{target.api_base}/models", headers=other_key, timeout=10).status_code == 401

        generator = Generator("embedded")  # LiteLLM, blocking, from this thread, with the prefill vLLM continues
        (answer,) = generator.complete(
            [{"role": "user", "content": "Name a colour."}], "A colour:", n=1, seed=0, max_tokens=16
        )
        assert answer.text.strip()

        groups = [group(["Red.", "Blue", "I like green."]) for _ in range(4)]
        scored = asyncio.run(judged(groups))
        assert all(s is not None and all(0.0 <= t.reward <= 1.0 for t in s) for s in scored)

        with httpx.stream(
            "POST",
            f"{target.api_base}/chat/completions",
            json={"model": target.name, "messages": CHAT, "max_tokens": 8, "stream": True},
            headers={"Authorization": f"Bearer {target.api_key}"},
            timeout=scaled(60),
        ) as streamed:
            events = [line for line in streamed.iter_lines() if line.startswith("data: ")]
        assert len(events) > 2 and events[-1] == "data: [DONE]"  # passed on chunk by chunk

        answers = asyncio.run(completions(target, 8))
        assert len(answers) == 8 and all(answers)
        answered = [answered_requests(replica) for replica in pool.replicas]
        assert all(count > 0 for count in answered), answered  # both replicas answered some

        servers |= with_command_line(descendants(os.getpid()), b"vllm.entrypoints") - earlier
    finally:
        backend.close()
        ray.shutdown()
    assert not wait_gone(servers, 60), "vLLM servers outlived the backend"
    assert embedded._served_elsewhere is None  # "embedded" means a server in this process again
