"""ART's `art.utils.trajectory_logging`: trajectory groups as ART's parquet files (what `model.log` writes to
`trajectories/<split>/NNNN.parquet`), so ART's readers and autorl's read the same files.

A row per trajectory (a failed rollout has none): `group_index`, `group_metadata`, `group_metrics` (JSON text),
`group_logs` (list of text), `reward`, `metrics`, `metadata`, `tools` (JSON text), `logs` (list of text),
`messages` (a list of `{role, content, tool_calls (JSON text), tool_call_id, trainable}`; `trainable` marks a
`Choice` the policy sampled). JSON fields are null when empty; the file is ZSTD-compressed. Logprobs and
additional histories are not kept (neither are they in ART's); `group_metrics` and `group_logs` are written
from a group that has them (autorl's `TrajectoryGroup` has neither: null), and read back only by
`autorl.utils.benchmarking.load_trajectories`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from openai.types.chat.chat_completion import Choice

from ..trajectories import Trajectory, TrajectoryGroup

MESSAGE_FIELDS = ("role", "content", "tool_calls", "tool_call_id", "trainable")


def _schema() -> Any:
    import pyarrow as pa

    message = pa.struct(
        [
            ("role", pa.string()),
            ("content", pa.string()),
            ("tool_calls", pa.string()),
            ("tool_call_id", pa.string()),
            ("trainable", pa.bool_()),
        ]
    )
    text = pa.string()
    return pa.schema(
        [
            ("group_index", pa.int64()),
            ("group_metadata", text),
            ("group_metrics", text),
            ("group_logs", pa.list_(text)),
            ("reward", pa.float64()),
            ("metrics", text),
            ("metadata", text),
            ("tools", text),
            ("logs", pa.list_(text)),
            ("messages", pa.list_(message)),
        ]
    )


def _json_or_none(value: Any) -> str | None:
    return json.dumps(value) if value else None


def _flat(item: dict[str, Any] | Choice) -> dict[str, Any]:
    """One message as a row's struct: a `Choice`'s message, trainable; a plain message, not."""
    if isinstance(item, Choice):
        message, trainable = item.message.model_dump(exclude_none=True), True
    elif isinstance(item, dict) and "finish_reason" in item and isinstance(item.get("message"), dict):
        message, trainable = item["message"], True  # a Choice as a dict
    else:
        message, trainable = dict(item), False
    content = message.get("content")
    return {
        "role": message.get("role"),
        "content": content if content is None or isinstance(content, str) else json.dumps(content),
        "tool_calls": _json_or_none(message.get("tool_calls")),
        "tool_call_id": None if trainable else message.get("tool_call_id"),
        "trainable": trainable,
    }


def trajectory_groups_rows(trajectory_groups: list[TrajectoryGroup]) -> list[dict[str, Any]]:
    """The rows `write_trajectory_groups_parquet` writes, as dicts."""
    rows = []
    for index, group in enumerate(trajectory_groups):
        group_logs = list(getattr(group, "logs", None) or []) or None
        for trajectory in group.trajectories:
            rows.append(
                {
                    "group_index": index,
                    "group_metadata": _json_or_none(group.metadata),
                    "group_metrics": _json_or_none(getattr(group, "metrics", None)),
                    "group_logs": group_logs,
                    "reward": float(trajectory.reward),
                    "metrics": _json_or_none(trajectory.metrics),
                    "metadata": _json_or_none(trajectory.metadata),
                    "tools": _json_or_none(trajectory.tools),
                    "logs": list(trajectory.logs) or None,
                    "messages": [_flat(m) for m in trajectory.messages_and_choices],
                }
            )
    return rows


def write_trajectory_groups_parquet(trajectory_groups: list[TrajectoryGroup], path: str | Path) -> None:
    """Write `trajectory_groups` to the parquet file `path` in ART's format (this module's docstring)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(trajectory_groups_rows(list(trajectory_groups)), schema=_schema())
    pq.write_table(table, str(path), compression="zstd")


def _loaded(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return {}
    return value if isinstance(value, dict) else {}


def _message(flat: dict[str, Any]) -> dict[str, Any]:
    """A row's message as a chat message (ART reads every message back as a plain dict, `Choice`s included)."""
    message = {"role": flat["role"], "content": flat["content"]}
    if flat.get("tool_calls"):
        message["tool_calls"] = json.loads(flat["tool_calls"])
    if flat.get("tool_call_id"):
        message["tool_call_id"] = flat["tool_call_id"]
    return message


def read_trajectory_groups_parquet(path: str | Path) -> list[TrajectoryGroup]:
    """The trajectory groups of an ART parquet file, in `group_index` order; each message a plain dict (as ART
    reads them: what was sampled is no longer marked, so such groups are for analysis, not training)."""
    import pyarrow.parquet as pq

    groups: dict[int, list[Trajectory]] = {}
    metadata: dict[int, dict[str, Any]] = {}
    for row in pq.read_table(str(path)).to_pylist():
        if row.get("reward") is None and row.get("messages") is None:
            continue
        index = row.get("group_index") or 0
        metadata.setdefault(index, _loaded(row.get("group_metadata")))
        tools = json.loads(row["tools"]) if row.get("tools") else None
        groups.setdefault(index, []).append(
            Trajectory(
                messages_and_choices=[_message(m) for m in row.get("messages") or []],
                tools=tools,
                reward=row["reward"],
                metrics=_loaded(row.get("metrics")),
                metadata=_loaded(row.get("metadata")),
                logs=row.get("logs") or [],
            )
        )
    return [TrajectoryGroup(groups[i], metadata=metadata[i]) for i in sorted(groups)]
