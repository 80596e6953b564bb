"""Turning a judge spec (`--judge ...`) into a judge.

A spec is either a judge model for `RulerJudge` (`openai/gpt-4.1-mini`, `embedded`,
`name@http://host:port/v1`), or `module:attribute` / `path/to/file.py:attribute` naming the user's
judge: a judge object, a judge class (instantiated without arguments), or a function
`(messages) -> float` (wrapped in a `FunctionJudge`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from .cache import CacheDir
from .client import JudgeModel
from .errors import JudgeSpecError
from .judges import FunctionJudge, Judge, is_judge
from .retry import RetryPolicy, describe
from .ruler_judge import RulerJudge

_ATTRIBUTE = r"(?P<attribute>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)"
_FILE_SPEC = re.compile(rf"^(?P<file>.+\.py):{_ATTRIBUTE}$")
_MODULE_SPEC = re.compile(rf"^(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):{_ATTRIBUTE}$")


def load_judge(
    spec: str, *, retry: RetryPolicy | None = None, cache_dir: CacheDir = "auto", debug: bool = False
) -> Judge:
    """The judge a spec names; `retry`, `cache_dir` and `debug` configure a `RulerJudge` when it is a model.

    Raises `JudgeSpecError` for an unknown provider, a missing module, file or attribute, or an
    attribute that is not a judge.
    """
    if match := _FILE_SPEC.match(spec):
        return _as_user_judge(_load_file(Path(match["file"])), match["attribute"], spec)
    if match := _MODULE_SPEC.match(spec):
        return _as_user_judge(_import_module(match["module"], spec), match["attribute"], spec)
    return RulerJudge(spec, retry=retry, cache_dir=cache_dir, debug=debug)


def as_judge(
    judge: str | JudgeModel | Judge,
    *,
    retry: RetryPolicy | None = None,
    cache_dir: CacheDir = "auto",
    debug: bool = False,
) -> Judge:
    """A judge object from a judge, a `JudgeModel`, or a spec string (see `load_judge`)."""
    if is_judge(judge):
        return judge
    if isinstance(judge, JudgeModel):
        return RulerJudge(judge, retry=retry, cache_dir=cache_dir, debug=debug)
    if isinstance(judge, str):
        return load_judge(judge, retry=retry, cache_dir=cache_dir, debug=debug)
    raise JudgeSpecError(f"expected a judge, a JudgeModel or a judge spec string, got {type(judge).__name__}")


def _load_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise JudgeSpecError(f"judge file {path} does not exist")
    resolved = path.resolve()
    name = f"_autorl_judge_{hashlib.sha256(str(resolved).encode()).hexdigest()[:12]}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, resolved)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise JudgeSpecError(f"judge file {path} failed to load: {describe(exc)}") from exc
    return module


def _import_module(name: str, spec: str) -> ModuleType:
    """Import `name`, looking in the working directory too (as `python -m` does)."""
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise JudgeSpecError(
                f"judge {spec!r}: no module named {exc.name!r}; for a model, prefix its provider (provider/model)"
            ) from None
        raise JudgeSpecError(f"judge module {name} failed to import: {describe(exc)}") from exc
    except Exception as exc:
        raise JudgeSpecError(f"judge module {name} failed to import: {describe(exc)}") from exc
    finally:
        if added:
            sys.path.remove(cwd)


def _as_user_judge(module: ModuleType, attribute: str, spec: str) -> Judge:
    obj: Any = module
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise JudgeSpecError(f"judge {spec!r}: {module.__name__} has no attribute {attribute!r}")
        obj = getattr(obj, part)
    if module.__name__.split(".")[0] in sys.stdlib_module_names or inspect.isbuiltin(obj):
        raise JudgeSpecError(
            f"judge {spec!r} is part of Python itself, not a judge: name a judge of your own module or file "
            "(an object with `async score_group(...)`, a class of such objects, or a function (messages) -> float)"
        )
    if is_judge(obj):
        return obj
    if inspect.isclass(obj) and inspect.iscoroutinefunction(getattr(obj, "score_group", None)):
        try:
            return obj()
        except Exception as exc:
            raise JudgeSpecError(f"judge class {spec!r} cannot be built without arguments: {describe(exc)}") from exc
    if inspect.isfunction(obj) or inspect.ismethod(obj):
        try:
            inspect.signature(obj).bind(None)
        except TypeError:
            raise JudgeSpecError(
                f"judge {spec!r} takes {inspect.signature(obj)}: a judge function takes one argument, the messages "
                "(messages) -> float"
            ) from None
        return FunctionJudge(obj)
    raise JudgeSpecError(
        f"judge {spec!r} is a {type(obj).__name__}, not a judge: expected an object with `async score_group(...)`, "
        "a class of such objects, or a function (messages) -> float"
    )
