"""The process tree of a run, read from /proc: what it started and whether any of it outlives it.

Used by the end-to-end tests, which check that no vLLM or MCP server outlives an `autorl run` however it
ends, and by the benchmarks (they import the test helpers, never the reverse): the fault-injection one
(`benchmarks/perf/faults.py`), the rollout one (`process_group_cpu_s`, the CPU time of a vLLM server's
processes) and those that measure memory (`rss_mib`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state, ppid, pgrp, ...); None when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def children(pid: int) -> set[int]:
    """The live processes whose parent is `pid`."""
    return alive({int(e.name) for e in Path("/proc").glob("[0-9]*") if (f := _stat(e.name)) and int(f[1]) == pid})


def descendants(pid: int) -> set[int]:
    """Every process below `pid`, zombies included."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _stat(entry.name)
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pids: set[int]) -> set[int]:
    """The processes of `pids` that run (not zombies, not gone)."""
    return {pid for pid in pids if (fields := _stat(pid)) is not None and fields[0] != "Z"}


def wait_gone(pids: set[int], timeout: float) -> set[int]:
    """Wait up to `timeout` seconds for `pids` to end; returns those still alive."""
    deadline = time.monotonic() + timeout
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.5)
    return alive(pids)


def _command_line(pid: int) -> bytes | None:
    """The command line of `pid`, its arguments separated by NUL bytes; None when it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None


def with_command_line(pids: set[int], part: bytes) -> set[int]:
    """The live processes of `pids` whose command line contains `part`."""
    return {pid for pid in alive(pids) if part in (_command_line(pid) or b"")}


def command_lines(pids: set[int], width: int = 80) -> list[str]:
    """The first `width` characters of the command lines of the live processes of `pids`, sorted."""
    lines = (_command_line(pid) for pid in alive(pids))
    return sorted(line[:width].decode(errors="replace") for line in lines if line is not None)


def process_group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) used so far by the live processes of process group `pgid`."""
    tick = os.sysconf("SC_CLK_TCK")
    groups = (_stat(entry.name) for entry in Path("/proc").glob("[0-9]*"))
    return sum((int(f[11]) + int(f[12])) / tick for f in groups if f is not None and int(f[2]) == pgid)


def rss_mib(pid: int) -> tuple[float, float]:
    """The resident and peak resident memory (VmRSS, VmHWM) of `pid`, in MiB (0 for a process gone)."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    except OSError:
        return 0.0, 0.0
    return tuple(int(fields.get(key, "0 kB").split()[0]) / 1024 for key in ("VmRSS", "VmHWM"))  # type: ignore[return-value]
