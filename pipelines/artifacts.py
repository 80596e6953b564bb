"""The content-addressed artifact store of the pipeline.

A stage's key is the hash of its name, its configuration, the code of its module and of the project modules
it imports (its code version, docstrings and comments left out) and the keys of the artifacts it reads. Its artifact is a directory
`<home>/artifacts/<stage>/<key>/`, written in a temporary directory and renamed into place, so it is
either complete or absent: a crash or a full disk mid-write leaves the previous artifact valid.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from autorl.atomic import atomic_dir, atomic_text, private_dir
from ruler.prompt import canonical_json  # one stable JSON text for every key and manifest

MANIFEST = "artifact.json"
SUMMARY = "summary.json"
"""Beside the manifest: the figures the stage returned, as `run.json` records them."""


PROJECT_PACKAGES = ("autorl", "ruler", "pipelines")
"""The packages whose source is part of an artifact's key (third-party code is not)."""


def code_version(module: ModuleType, packages: tuple[str, ...] = PROJECT_PACKAGES) -> str:
    """A hash of the code of `module` and of every module of `packages` it imports, transitively.

    Editing a stage's code, or that of any project module its code runs, invalidates its artifacts; editing a
    docstring, a comment or the layout does not (`code_text`), so documentation never costs a retraining.
    """
    digest = hashlib.sha256()
    for name in sorted(imported_modules(module.__name__, packages)):
        digest.update(f"{name}\n".encode())
        digest.update(code_text(_module_file(name).read_text(encoding="utf-8")).encode())
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=1024)  # a key is computed many times per run: parse each version of a file once
def code_text(source: str) -> str:
    """The syntax tree of a Python source without its docstrings (every string statement: module, class,
    function and attribute docstrings); comments and layout are not in the tree. Two versions with the same
    text are the same program (`benchmarks/perf/stale.py` tells a docstring edit from a code change by it)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list):
                kept = [n for n in body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
                setattr(node, field, kept or [ast.Pass()])
    return ast.dump(tree)


def imported_modules(name: str, packages: tuple[str, ...]) -> set[str]:
    """`name` and the modules of `packages` that it imports, directly or through each other.

    Imports are read from the source, function-level ones included, without running them; those under
    `if TYPE_CHECKING:` are skipped, since they never run. A package's `__init__` counts where it is
    imported itself.
    """
    found, todo = set(), [name]
    while todo:
        current = todo.pop()
        if current in found:
            continue
        found.add(current)
        todo += [m for m in _direct_imports(current, packages) if m not in found]
    return found


@functools.cache
def _direct_imports(name: str, packages: tuple[str, ...]) -> tuple[str, ...]:
    path = _module_file(name)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return tuple(_imports(ast.parse(path.read_text(encoding="utf-8")), package, packages))


@functools.cache
def _module_file(name: str) -> Path | None:
    """The source file of module `name` (a module of an importable package), found without importing it."""
    top, _, rest = name.partition(".")
    spec = importlib.util.find_spec(top)
    if spec is None or spec.submodule_search_locations is None:
        return None
    base = Path(next(iter(spec.submodule_search_locations))).joinpath(*rest.split(".") if rest else [])
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _imports(tree: ast.AST, package: str, packages: tuple[str, ...]) -> Iterator[str]:
    """The modules of `packages` that the import statements of `tree` (a module of `package`) load."""
    skipped = {
        id(node)
        for guard in ast.walk(tree)
        if isinstance(guard, ast.If) and "TYPE_CHECKING" in ast.unparse(guard.test)
        for statement in guard.body
        for node in ast.walk(statement)
    }
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}".rstrip(".")
            if base.split(".")[0] not in packages:
                continue
            names = [base, *(_source_module(base, alias.name) for alias in node.names)]
        else:
            continue
        yield from (n for n in names if n.split(".")[0] in packages and _module_file(n) is not None)


def _source_module(module: str, name: str) -> str:
    """Where `from module import name` takes `name` from: the submodule `module.name`; for a package, the
    module that defines the class or function it exports (re-exported, or lazily as `autorl` does);
    else `module` itself, which defines it."""
    if _module_file(f"{module}.{name}") is not None:
        return f"{module}.{name}"
    if _module_file(module) is None or _module_file(module).name != "__init__.py":
        return module
    defined_in = getattr(getattr(importlib.import_module(module), name, None), "__module__", None)
    return defined_in if isinstance(defined_in, str) else module


def stage_key(stage: str, config: dict[str, Any], code: str, upstream: dict[str, str]) -> str:
    payload = {"stage": stage, "config": config, "code": code, "upstream": upstream}
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()[:20]


class ArtifactStore:
    """Artifacts under `root/<stage>/<key>/`, each with a manifest written last."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def path(self, stage: str, key: str) -> Path:
        return self.root / stage / key

    def exists(self, stage: str, key: str) -> bool:
        return (self.path(stage, key) / MANIFEST).is_file()

    def manifest(self, stage: str, key: str) -> dict[str, Any]:
        return json.loads((self.path(stage, key) / MANIFEST).read_text())

    @contextmanager
    def write(self, stage: str, key: str, meta: dict[str, Any]) -> Iterator[Path]:
        """Yield a temporary directory to fill; on success it becomes the artifact, atomically (a full
        disk is a `DiskFullError`, and the previous artifact is untouched). The store's root is made private
        (`private_dir`): artifacts hold the task's inputs, prompts and answers."""
        private_dir(self.root)
        with atomic_dir(self.path(stage, key)) as tmp:  # replaces an artifact removed by --force
            yield tmp
            (tmp / MANIFEST).write_text(canonical_json({"stage": stage, "key": key, "created": time.time(), **meta}))

    def summary(self, stage: str, key: str) -> dict[str, Any]:
        """The summary written for an artifact; empty when it has none."""
        path = self.path(stage, key) / SUMMARY
        return json.loads(path.read_text()) if path.exists() else {}

    def write_summary(self, stage: str, key: str, summary: dict[str, Any]) -> None:
        self.path(stage, key).mkdir(parents=True, exist_ok=True)
        write_json(self.path(stage, key) / SUMMARY, summary)

    def remove(self, stage: str, key: str) -> None:
        shutil.rmtree(self.path(stage, key), ignore_errors=True)


def write_json(path: Path, value: Any) -> None:
    """Write JSON atomically, for files updated in place."""
    atomic_text(path, json.dumps(value, indent=2, default=str))
