"""ART's `art.utils.strip_logprobs`: a copy of any nested data without its logprobs, to store it smaller."""

from __future__ import annotations

import copy
import logging
from typing import Any

log = logging.getLogger("autorl")


def strip_logprobs(obj: Any) -> Any:
    """A deep copy of `obj` with every `logprobs` removed: dict keys of that name dropped, attributes of that name
    (an OpenAI `Choice`'s, a pydantic model's) set to None, lists and tuples walked. `obj` itself is unchanged;
    an object that cannot be copied is returned as it is, with a warning."""
    try:
        copied = copy.deepcopy(obj)
    except Exception as exc:  # any object's __deepcopy__ may raise anything
        log.warning("strip_logprobs: %s could not be copied (%s); returned unchanged", type(obj).__name__, exc)
        return obj
    return _stripped(copied)


def _stripped(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {key: _stripped(value) for key, value in obj.items() if key != "logprobs"}
    if isinstance(obj, list | tuple):
        items = [_stripped(value) for value in obj]
        return tuple(items) if isinstance(obj, tuple) else items
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        for key, value in list(vars(obj).items()):
            object.__setattr__(obj, key, None if key == "logprobs" else _stripped(value))
    return obj
