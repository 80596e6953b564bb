"""Do N vLLM replicas behind autorl's router stay busy? A discrete-event simulation of one training step.

    python benchmarks/perf/replica_simulation.py [--seed 0] [--repeats 5] [--train-s SECONDS]  # --help: the knobs

No servers, no sleeps, no wall time: a virtual clock and a heap of events, so every setting runs in seconds.
The replica each request goes to is chosen by autorl's own `ReplicaPool` (autorl/backends/cluster/routing.py): `pick()` (the
ready, up-to-date replica with the fewest outstanding requests, ties in turn) and `release()` when the last
token is out; `publish(0)` makes the replicas ready, and a killed replica goes through the pool's own
`failed()` -> `_recover()` path, whose `restart` callable returns when the simulation's clock reaches the
end of the outage. Baselines on the same replicas and workload: `round_robin` and `random`, each choosing
among the ready, up-to-date replicas without looking at outstanding counts.

The model:
- replica: continuous batching, as vLLM's scheduler: at most `--max-num-seqs` sequences run, more wait in its
  queue and join at the next iteration boundary (a request reaching a busy replica waits for that boundary
  too); one decode iteration takes `t0 * (1 + a * (k - 1))` s for k running sequences (cheap batching, as on
  a GPU), plus `--prefill-s-per-token` times the prompt tokens of the sequences it admits; every running
  sequence gains one token per iteration. A "2x slower" replica takes twice as long per iteration.
- workload (fixed by the seed, the same for every policy): G groups x S samples rollouts, all starting at
  t=0; each a multi-turn agent of `--min-turns`..`--max-turns` turns, each turn one request whose output
  length is lognormal (median `--median-tokens`, sigma `--sigma`, capped at `--max-tokens`), with a tool call
  between turns (exponential, mean `--tool-s`) during which the rollout holds no request. The prompt grows
  with the turns (previous outputs plus 200 tokens per tool result; no prefix caching assumed).
- kill: one replica dies at 25% of the least-outstanding makespan of the same seed on 4 equal replicas and is
  back `--recovery-s` later; its running and queued requests are sent again at once, as `RoutingTransport`
  does, and restart from scratch (their partial tokens are lost).

Reported per scenario and policy (medians over `--repeats` seeds, makespan with its min-max):
- makespan: time until the last rollout ends.
- bound: a lower bound on any router's makespan, max(capacity, chain), both printed. capacity = all output
  tokens / the replicas' summed peak throughput (full batches of max-num-seqs, prefill ignored); chain = the
  longest rollout alone on the fastest replica (batch of 1, its prefills, its tool calls). Loose: in fact the
  longest rollout shares its replica's batch (each token then costs 1 + a * (k - 1) times t0); no outage.
- idle_queued: fraction of a replica's up time it ran nothing while some request waited in a queue (work it
  could have taken). Least-outstanding never sends a request to a busy replica while one is idle, so it is 0
  by construction; the check is that the real `pick()` keeps it so.
- idle_loaded: fraction of its up time it ran nothing while at least as many requests were in flight (queued
  or running) as replicas were up: a router that spread them evenly would have given it one. Least-outstanding
  can still leave one idle when its last requests finish before new ones arrive (requests never migrate).
- idle_all: fraction of a replica's up time it ran nothing, over the whole rollout phase; includes the tool
  calls of the last rollouts and the tail, when fewer requests remain than replicas (unavoidable).
- queue_ms: mean time from a request's sending to its first iteration.
- vs least: makespan(policy) / makespan(least), also printed as the `ratios` table of the perf scripts.
Then the training phase of a synchronous on-policy step (least-outstanding): the replicas wait while the
trainer runs (`--train-s`, default 30% of the 1-replica rollout makespan) and the new LoRA is published
(`--publish-s`); step time = rollout makespan + train + publish. Per N: the fraction of a step every replica
idles for training and publishing, the fraction it idles in all (adding its rollout-phase idle_all), and
the step's speed-up over one replica; and the steady-state step of a one-step-off pipeline (`--async 1`,
the trainer on a device of its own: the next step's rollouts run while this step trains and publishes, every
trained group one version old): max(rollout makespan, train + publish), against the synchronous step. Writes `benchmarks/perf/results/replica_simulation.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import itertools
import logging
import math
import random
import statistics
import time
from collections import deque
from dataclasses import dataclass, field

from _common import print_table, ratio_entry, summary, write_result

from autorl.backends.cluster.routing import Replica, ReplicaPool

POLICIES = ("least", "round_robin", "random")
SCENARIOS = {  # name: (slowdown per replica, one replica killed)
    "N=2": ((1.0,) * 2, False),
    "N=4": ((1.0,) * 4, False),
    "N=8": ((1.0,) * 8, False),
    "N=16": ((1.0,) * 16, False),
    "N=4, one 2x slower": ((2.0, 1.0, 1.0, 1.0), False),
    "N=4, one killed": ((1.0,) * 4, True),
}
TOOL_RESULT_TOKENS = 200
"""Prompt tokens a tool result adds to the next turn's prompt."""

Turn = tuple[int, float]
"""One turn of a rollout: its output tokens and the tool call's seconds after it (unused after the last)."""


@dataclass
class Request:
    """One turn's request: its rollout, output and prompt tokens, when it was sent, tokens still to decode."""

    rollout: int
    tokens: int
    prompt: int
    sent_at: float
    left: int


@dataclass
class Server:
    """One replica's engine: its router entry, its speed, its running batch and queue, its idle time."""

    replica: Replica
    slowdown: float
    running: list[Request] = field(default_factory=list)
    queue: deque[Request] = field(default_factory=deque)
    epoch: int = 0
    """Bumped when it is killed, which voids its pending iteration."""
    up_s: float = 0.0
    idle_queued_s: float = 0.0
    idle_loaded_s: float = 0.0
    idle_all_s: float = 0.0


def make_workload(args: argparse.Namespace, seed: int) -> list[list[Turn]]:
    """The rollouts of one step: for each, its turns (output tokens, tool seconds after)."""
    rng = random.Random(seed)
    mu = math.log(args.median_tokens)
    return [
        [
            (min(args.max_tokens, max(1, round(rng.lognormvariate(mu, args.sigma)))), rng.expovariate(1 / args.tool_s))
            for _ in range(rng.randint(args.min_turns, args.max_turns))
        ]
        for _ in range(args.groups * args.samples)
    ]


def lower_bound(
    args: argparse.Namespace, workload: list[list[Turn]], slowdowns: tuple[float, ...]
) -> tuple[float, float]:
    """(capacity, chain): no router finishes sooner than either (see the module docstring)."""
    m = args.max_num_seqs
    peak = sum(m / (s * args.t0 * (1 + args.a * (m - 1))) for s in slowdowns)
    capacity = sum(tokens for turns in workload for tokens, _ in turns) / peak
    chain = 0.0
    for turns in workload:
        prompt, length = args.prompt_tokens, 0.0
        for j, (tokens, tool_s) in enumerate(turns):
            length += min(slowdowns) * (tokens * args.t0 + prompt * args.prefill_s_per_token)
            length += tool_s if j < len(turns) - 1 else 0.0
            prompt += tokens + TOOL_RESULT_TOKENS
        chain = max(chain, length)
    return capacity, chain


async def simulate(
    args: argparse.Namespace,
    workload: list[list[Turn]],
    slowdowns: tuple[float, ...],
    policy: str,
    seed: int,
    kill_at: float | None = None,
) -> dict:
    """One rollout phase on virtual time; the replica of each request chosen by `policy`."""
    back = asyncio.get_running_loop().create_future()

    async def load(replica: Replica, step: int) -> None:
        return None

    async def restart(replica: Replica) -> str:
        await back  # the outage ends when the simulation's clock says so
        return replica.url

    servers = [Server(Replica(i, url=f"http://replica-{i}:8000"), s) for i, s in enumerate(slowdowns)]
    pool = ReplicaPool([s.replica for s in servers], load=load, restart=restart)
    await pool.publish(0)
    route_rng, turn = random.Random(f"route-{seed}"), itertools.count()
    events: list[tuple[float, int, str, int, int]] = []  # time, order, kind, rollout or replica, epoch
    order = itertools.count()
    next_turn, prompts = [0] * len(workload), [args.prompt_tokens] * len(workload)
    delays: list[float] = []
    now = 0.0
    inflight = queued = lost = finished = 0

    def at(t: float, kind: str, arg: int, epoch: int = 0) -> None:
        heapq.heappush(events, (t, next(order), kind, arg, epoch))

    def choose() -> Server:
        if policy == "least":
            return servers[pool.pick().index]
        ready = [r for r in pool.replicas if r.state == "ready" and r.served_step == pool.step]
        chosen = ready[next(turn) % len(ready)] if policy == "round_robin" else route_rng.choice(ready)
        chosen.outstanding += 1
        return servers[chosen.index]

    def iterate(server: Server) -> None:
        """Admit from the queue up to max-num-seqs and run one iteration, if there is anything to run."""
        nonlocal queued
        prefill = 0
        while server.queue and len(server.running) < args.max_num_seqs:
            request = server.queue.popleft()
            queued -= 1
            delays.append(now - request.sent_at)
            prefill += request.prompt
            server.running.append(request)
        if server.running:
            k = len(server.running)
            step_s = args.t0 * (1 + args.a * (k - 1)) + args.prefill_s_per_token * prefill
            at(now + server.slowdown * step_s, "iteration", server.replica.index, server.epoch)

    def send(request: Request) -> None:
        nonlocal queued
        server = choose()
        server.queue.append(request)
        queued += 1
        if not server.running:
            iterate(server)

    def account(until: float) -> None:
        """Add the time since the last event to each up replica's up and idle times."""
        up = [server for server in servers if server.replica.state == "ready"]
        for server in up:
            server.up_s += until - now
            if not server.running:
                server.idle_all_s += until - now
                server.idle_queued_s += (until - now) if queued else 0.0
                server.idle_loaded_s += (until - now) if inflight >= len(up) else 0.0

    for i in range(len(workload)):
        at(0.0, "request", i)
    if kill_at is not None:
        at(kill_at, "kill", 0)
    while finished < len(workload):
        t, _, kind, arg, epoch = heapq.heappop(events)
        account(t)
        now = t
        if kind == "request":
            tokens = workload[arg][next_turn[arg]][0]
            inflight += 1
            send(Request(arg, tokens, prompts[arg], now, tokens))
        elif kind == "iteration":
            server = servers[arg]
            if epoch != server.epoch:
                continue  # the replica was killed during this iteration
            for request in server.running:
                request.left -= 1
            for request in [r for r in server.running if r.left == 0]:
                server.running.remove(request)
                pool.release(server.replica)
                inflight -= 1
                tokens, tool_s = workload[request.rollout][next_turn[request.rollout]]
                prompts[request.rollout] += tokens + TOOL_RESULT_TOKENS
                next_turn[request.rollout] += 1
                if next_turn[request.rollout] < len(workload[request.rollout]):
                    at(now + tool_s, "request", request.rollout)
                else:
                    finished += 1
            iterate(server)
        elif kind == "kill":
            server = servers[arg]
            pool.failed(server.replica, "killed by the simulation")
            server.epoch += 1
            victims = server.running + list(server.queue)
            queued -= len(server.queue)
            server.running, server.queue = [], deque()
            for request in victims:
                lost += request.tokens - request.left
                pool.release(server.replica)
                send(Request(request.rollout, request.tokens, request.prompt, now, request.tokens))
            at(now + args.recovery_s, "revive", arg)
        else:  # revive: let the pool's own recovery finish (restart returns, load, ready)
            back.set_result(None)
            while servers[arg].replica.state != "ready":
                await asyncio.sleep(0)
    pool.cancel_recoveries()  # the phase ended before the outage did
    return {
        "makespan_s": now,
        "idle_queued": [s.idle_queued_s / s.up_s for s in servers],
        "idle_loaded": [s.idle_loaded_s / s.up_s for s in servers],
        "idle_all": [s.idle_all_s / s.up_s for s in servers],
        "queue_ms": 1000 * statistics.mean(delays),
        "lost_tokens": lost,
    }


def aligned(rows: list[tuple]) -> None:
    """Print rows (the first a header) as an aligned text table."""
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if i == 0:
            print("  ".join("-" * width for width in widths))


def per_replica(samples: list[list[float]]) -> list[float]:
    """The median over seeds of each replica's value."""
    return [round(statistics.median(values), 4) for values in zip(*samples, strict=True)]


def mean_max(values: list[float]) -> str:
    """A per-replica figure in one cell: its mean over the replicas (the worst replica's)."""
    return f"{statistics.mean(values):.3f} ({max(values):.3f})"


def scenario_row(name: str, policy: str, results: list[dict], least: list[dict], bounds: list[tuple]) -> dict:
    """One scenario and policy over the seeds: medians (makespan and queueing with min-max), per-replica idle."""
    makespan = statistics.median(r["makespan_s"] for r in results)
    return {
        "scenario": name,
        "policy": policy,
        "makespan_s": summary([r["makespan_s"] for r in results]),
        "bound_s": {
            "capacity": round(statistics.median(b[0] for b in bounds), 3),
            "chain": round(statistics.median(b[1] for b in bounds), 3),
            "max": round(statistics.median(max(b) for b in bounds), 3),
        },
        "vs_least": round(makespan / statistics.median(r["makespan_s"] for r in least), 3),
        **{idle: per_replica([r[idle] for r in results]) for idle in ("idle_queued", "idle_loaded", "idle_all")},
        "queue_ms": summary([r["queue_ms"] for r in results]),
        "lost_tokens": statistics.median(r["lost_tokens"] for r in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="seed of the first repeat (then seed+1, ...)")
    parser.add_argument("--repeats", type=int, default=5, help="seeds (workloads) each scenario and policy runs on")
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8, help="rollouts per group")
    parser.add_argument("--min-turns", type=int, default=1)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--median-tokens", type=float, default=150.0, help="median output tokens of a turn")
    parser.add_argument("--sigma", type=float, default=0.8, help="sigma of the lognormal output length")
    parser.add_argument("--max-tokens", type=int, default=1024, help="cap on a turn's output tokens")
    parser.add_argument("--tool-s", type=float, default=0.5, help="mean seconds of a tool call between turns")
    parser.add_argument("--prompt-tokens", type=int, default=400, help="prompt tokens of a rollout's first turn")
    parser.add_argument("--max-num-seqs", type=int, default=32, help="sequences a replica runs at once")
    parser.add_argument("--t0", type=float, default=0.02, help="seconds of a decode iteration of one sequence")
    parser.add_argument("--a", type=float, default=0.05, help="extra iteration time per extra running sequence")
    parser.add_argument("--prefill-s-per-token", type=float, default=1e-5)
    parser.add_argument("--recovery-s", type=float, default=30.0, help="outage of the killed replica")
    parser.add_argument(
        "--train-s",
        type=float,
        default=None,
        help="trainer time per step (default: 30%% of the 1-replica rollout makespan)",
    )
    parser.add_argument("--publish-s", type=float, default=1.0, help="seconds to load a new LoRA into every replica")
    args = parser.parse_args()
    started = time.monotonic()
    logging.getLogger("autorl").setLevel(logging.ERROR)  # the pool warns of every simulated kill

    seeds = [args.seed + r for r in range(args.repeats)]
    workloads = {seed: make_workload(args, seed) for seed in seeds}
    runs = {("N=1", "least"): [asyncio.run(simulate(args, workloads[s], (1.0,), "least", s)) for s in seeds]}
    rows = []
    for name, (slowdowns, killed) in SCENARIOS.items():
        bounds = [lower_bound(args, workloads[s], slowdowns) for s in seeds]
        kill_at = [0.25 * r["makespan_s"] for r in runs["N=4", "least"]] if killed else [None] * len(seeds)
        for policy in POLICIES:
            runs[name, policy] = [
                asyncio.run(simulate(args, workloads[s], slowdowns, policy, s, k))
                for s, k in zip(seeds, kill_at, strict=True)
            ]
            rows.append(scenario_row(name, policy, runs[name, policy], runs[name, "least"], bounds))

    header = ("scenario", "policy", "makespan s [min-max]", "bound s cap/chain", "vs least")
    header += ("idle_queued (max)", "idle_loaded (max)", "idle_all (max)", "queue ms")
    table = [header]
    for row in rows:
        m, b = row["makespan_s"], row["bound_s"]
        table.append((
            row["scenario"], row["policy"], f"{m['median']:.1f} [{m['min']:.1f}-{m['max']:.1f}]",
            f"{b['capacity']:.1f}/{b['chain']:.1f}", f"{row['vs_least']:.2f}x", mean_max(row["idle_queued"]),
            mean_max(row["idle_loaded"]), mean_max(row["idle_all"]), f"{row['queue_ms']['median']:.0f}",
        ))  # fmt: skip
    print("rollout phase (medians over seeds; idle: fraction of up time, mean over replicas (worst replica))")
    aligned(table)

    single = statistics.median(r["makespan_s"] for r in runs["N=1", "least"])
    train_s = args.train_s if args.train_s is not None else 0.3 * single
    training = []
    for n in (1, 2, 4, 8, 16):
        results = runs[f"N={n}", "least"]
        rollout = statistics.median(r["makespan_s"] for r in results)
        idle_rollout = statistics.median(statistics.mean(r["idle_all"]) for r in results)
        step = rollout + train_s + args.publish_s
        pipelined = max(rollout, train_s + args.publish_s)
        training.append({
            "replicas": n, "rollout_s": round(rollout, 3), "step_s": round(step, 3),
            "speedup": round((training[0]["step_s"] if training else step) / step, 3),
            "idle_for_training": round((train_s + args.publish_s) / step, 4),
            "idle_in_step": round((idle_rollout * rollout + train_s + args.publish_s) / step, 4),
            "pipelined_step_s": round(pipelined, 3), "pipelined_vs_sync": round(step / pipelined, 3),
        })  # fmt: skip
    print(f"\ntraining phase (least; train {train_s:.1f} s + publish {args.publish_s:.1f} s per step):")
    aligned([("replicas", "rollout s", "step s", "speed-up", "idle for training", "idle in step",
              "one-step-off step s", "vs synchronous")] + [
        (t["replicas"], f"{t['rollout_s']:.1f}", f"{t['step_s']:.1f}", f"{t['speedup']:.2f}x",
         f"{t['idle_for_training']:.2f}", f"{t['idle_in_step']:.2f}", f"{t['pipelined_step_s']:.1f}",
         f"{t['pipelined_vs_sync']:.2f}x")
        for t in training
    ])  # fmt: skip

    least = {name: statistics.median(r["makespan_s"] for r in runs[name, "least"]) for name in SCENARIOS}
    conditions = f"simulated, {len(seeds)} seeds; ratio = makespan(policy) / makespan(least)"
    ratios = [
        ratio_entry(f"{row['scenario']}: makespan, least vs {row['policy']}", least[row["scenario"]],
                    row["makespan_s"]["median"], "s", None, False, conditions)
        for row in rows if row["policy"] != "least"
    ]  # fmt: skip
    print()
    print_table(ratios)
    result = {
        "benchmark": "simulated rollouts on N vLLM replicas: ReplicaPool's least-outstanding vs round robin, random",
        "settings": vars(args) | {"seeds": seeds},
        "scenarios": rows,
        "training_phase": {"train_s": round(train_s, 3), "publish_s": args.publish_s, "by_replicas": training},
        "ratios": ratios,
    }
    path = write_result("replica_simulation", result, started)
    print(f"\nwrote {path} ({time.monotonic() - started:.1f}s)")


if __name__ == "__main__":
    main()
