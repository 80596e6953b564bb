"""ART's `art.utils.benchmarking.load_trajectories`: every trajectory a project's models logged, as one table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import MissingExtraError
from ..output_dirs import get_default_art_path, get_models_dir, get_trajectories_dir

if TYPE_CHECKING:
    import polars as pl


def _polars() -> Any:
    try:
        import polars
    except ImportError:
        raise MissingExtraError("autorl.utils.benchmarking needs polars: pip install 'autorl[plotting]'") from None
    return polars


def _object(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except (json.JSONDecodeError, TypeError):
        return {}
    return value if isinstance(value, dict) else {}


def _message(flat: dict[str, Any]) -> dict[str, Any]:
    message = {"role": flat.get("role"), "content": flat.get("content"), "trainable": bool(flat.get("trainable"))}
    try:
        calls = json.loads(flat["tool_calls"]) if flat.get("tool_calls") else None
    except (json.JSONDecodeError, TypeError):
        calls = None
    message["tool_calls"] = [{"function": c.get("function")} for c in calls] if isinstance(calls, list) else None
    return message


def _files(root: Path, models: set[str] | None) -> list[tuple[Path, str, str, int]]:
    """(file, model, split, step) of every `<model>/trajectories/<split>/NNNN.parquet` under `root`."""
    found = []
    for model_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        if models is not None and model_dir.name not in models:
            continue
        trajectories = Path(get_trajectories_dir(str(model_dir)))
        for split_dir in sorted(p for p in trajectories.glob("*") if p.is_dir()):
            for file in sorted(split_dir.glob("*.parquet")):
                if file.stem.isdigit():
                    found.append((file, model_dir.name, split_dir.name, int(file.stem)))
    return found


async def load_trajectories(
    project_name: str, models: list[str] | None = None, debug: bool = False, art_path: str | None = None
) -> pl.DataFrame:
    """A polars table of every trajectory that `model.log` wrote for `project_name`'s models (or those named in
    `models`) under `art_path` (a backend's `path`; `.autorl` in the working directory if None): files
    `<art_path>/<project>/models/<model>/trajectories/<split>/<step>.parquet`, a row per trajectory.

    Columns: `model`, `split`, `step`, `reward`, `group_number` (a number per group, unique across files),
    `messages` (role, content, tool_calls, trainable), `logs`; then `metric_<name>` (float) for every trajectory
    metric, `metadata_<name>` (text) for every metadata key, and `group_metric_<name>` / `group_metadata_<name>`
    for the groups'. A value a row lacks is null. No files: an empty table. `debug`: a line per file that
    could not be read (it is skipped)."""
    pl = _polars()
    import pyarrow.parquet as pq

    root = Path(get_models_dir(project_name, art_path or get_default_art_path()))
    if not root.is_dir():
        return pl.DataFrame()
    rows: list[dict[str, Any]] = []
    columns: dict[str, Any] = {}
    groups: dict[tuple[str, str, int, int], int] = {}
    for file, model, split, step in _files(root, set(models) if models is not None else None):
        try:
            table = pq.read_table(file).to_pylist()
        except Exception as exc:  # a torn or foreign file: skipped, as ART skips it
            if debug:
                print(f"could not read {file}: {exc}")
            continue
        for row in table:
            if row.get("reward") is None and row.get("messages") is None:
                continue
            number = groups.setdefault((model, split, step, row.get("group_index") or 0), len(groups) + 1)
            record: dict[str, Any] = {
                "model": model,
                "split": split,
                "step": step,
                "reward": row.get("reward"),
                "group_number": number,
                "messages": [_message(m) for m in row.get("messages") or []],
                "logs": row.get("logs"),
            }
            for prefix, source, kind in (
                ("metric_", "metrics", pl.Float64),
                ("metadata_", "metadata", pl.Utf8),
                ("group_metric_", "group_metrics", pl.Float64),
                ("group_metadata_", "group_metadata", pl.Utf8),
            ):
                for key, value in _object(row.get(source)).items():
                    name = f"{prefix}{key}"
                    columns[name] = kind
                    record[name] = str(value) if kind is pl.Utf8 else _number(value)
            rows.append(record)
    if not rows:
        return pl.DataFrame()
    call = pl.Struct({"function": pl.Struct({"name": pl.Utf8, "arguments": pl.Utf8})})
    message = pl.Struct({"role": pl.Utf8, "content": pl.Utf8, "tool_calls": pl.List(call), "trainable": pl.Boolean})
    schema = {
        "model": pl.Utf8,
        "split": pl.Utf8,
        "step": pl.Int64,
        "reward": pl.Float64,
        "group_number": pl.Int64,
        "messages": pl.List(message),
        "logs": pl.List(pl.Utf8),
        **columns,
    }
    return pl.DataFrame(rows, schema=schema)


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
