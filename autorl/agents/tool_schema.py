"""The JSON schema of a Python function's keyword arguments (`signature_schema`), from its type hints and
docstring: what a `[[tools]]` function without `parameters` is described to the model with."""

from __future__ import annotations

import collections
import collections.abc
import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Literal

from .tool_state import is_state

_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def signature_schema(function: Callable[..., Any]) -> tuple[dict[str, Any], str]:
    """The JSON schema of `function`'s keyword arguments, and its description.

    Types come from the type hints: str, int, float, bool, list[...], dict[str, ...], Literal[...],
    Optional[...] / `X | None` and Annotated[X, "description"]; a parameter without a hint takes any
    JSON value. A parameter with a default is not required; one annotated `RolloutState` is autorl's to fill
    (`tool_state`), not the model's, and is left out. The description is the docstring's first
    paragraph; a Google-style `Args:` or NumPy-style `Parameters` section describes the parameters.
    Raises TypeError for a hint that has no JSON schema.
    """
    signature = inspect.signature(function)
    try:
        hints = typing.get_type_hints(
            function if inspect.isroutine(function) else type(function).__call__, include_extras=True
        )
    except Exception:
        hints = {}
    summary, documented = parse_docstring(inspect.getdoc(function) or "")
    properties: dict[str, Any] = {}
    required: list[str] = []
    extra_allowed = False
    for parameter in signature.parameters.values():
        if parameter.kind is parameter.VAR_KEYWORD:
            extra_allowed = True
            continue
        if parameter.kind is parameter.VAR_POSITIONAL:
            continue
        if is_state(hints.get(parameter.name, parameter.annotation)):
            continue
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise TypeError(f"parameter {parameter.name!r} is positional-only; tools are called with keywords")
        try:
            schema = _type_schema(hints.get(parameter.name, Any))
        except TypeError as exc:
            raise TypeError(f"parameter {parameter.name!r}: {exc}") from None
        if parameter.name in documented:
            schema = {**schema, "description": documented[parameter.name]}
        if parameter.default is parameter.empty:
            required.append(parameter.name)
        elif _is_json(parameter.default):
            schema = {**schema, "default": parameter.default}
        properties[parameter.name] = schema
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    if not extra_allowed:
        parameters["additionalProperties"] = False
    return parameters, summary


def _type_schema(hint: Any) -> dict[str, Any]:
    """The JSON schema of one type hint (see `signature_schema`)."""
    if hint is Any:
        return {}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        schema = _type_schema(args[0])
        notes = [note for note in args[1:] if isinstance(note, str)]
        return {**schema, "description": notes[0]} if notes else schema
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if origin is Literal:
        kinds = {_SCALARS.get(type(value)) for value in args}
        return {"enum": list(args), **({"type": kinds.pop()} if len(kinds) == 1 and None not in kinds else {})}
    if origin in (typing.Union, types.UnionType):
        options = [_type_schema(arg) for arg in args if arg is not type(None)]
        nullable = len(options) < len(args)
        if len(options) == 1 and nullable and isinstance(options[0].get("type"), str):
            return {**options[0], "type": [options[0]["type"], "null"]}
        return {"anyOf": options + ([{"type": "null"}] if nullable else [])}
    if hint in (list, tuple, set, frozenset) or origin in (list, tuple, set, frozenset, collections.abc.Sequence):
        items = [arg for arg in args if arg is not Ellipsis]
        return {"type": "array", **({"items": _type_schema(items[0])} if len(set(items)) == 1 else {})}
    if hint is dict or origin in (dict, collections.abc.Mapping):
        return {"type": "object", **({"additionalProperties": _type_schema(args[1])} if args else {})}
    raise TypeError(
        f"type {getattr(hint, '__name__', hint)!s} has no JSON schema here "
        "(str, int, float, bool, list, dict, Literal and Optional have)"
    )


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The first paragraph of a docstring as one line, and its parameter descriptions by name."""
    lines = doc.expandtabs().splitlines()
    summary = []
    for line in lines:
        if not line.strip() or re.match(r"(Args|Arguments|Parameters|Returns|Raises):?\s*$", line.strip()):
            break
        summary.append(line.strip())
    return " ".join(summary), _argument_docs(lines)


def _argument_docs(lines: list[str]) -> dict[str, str]:
    """`name: text` lines of a Google-style `Args:` section, or `name : type` entries of a NumPy-style
    `Parameters` section (followed by a dashed line) with their indented text."""
    for number, line in enumerate(lines):
        header = line.strip()
        if re.fullmatch(r"(Args|Arguments|Parameters):", header):
            body, numpy = lines[number + 1 :], False
            break
        if header == "Parameters" and number + 1 < len(lines) and re.fullmatch(r"-{3,}", lines[number + 1].strip()):
            body, numpy = lines[number + 2 :], True
            break
    else:
        return {}
    docs: dict[str, str] = {}
    name, base = None, None
    for number, line in enumerate(body):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        base = indent if base is None else base
        if indent < base or (numpy and number + 1 < len(body) and re.fullmatch(r"-{3,}", body[number + 1].strip())):
            break  # the next section
        if indent == base:
            entry = re.match(
                r"\*{0,2}(\w+)\s*(?:\(.*?\))?\s*:\s*(.*)$" if not numpy else r"(\w+)\s*(?::.*)?()$", line.strip()
            )
            if entry is None:
                break
            name = entry.group(1)
            docs[name] = entry.group(2).strip()
        elif name is not None:
            docs[name] = f"{docs[name]} {line.strip()}".strip()
    return docs


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
