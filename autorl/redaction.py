"""Secrets kept out of what autorl writes: `redacted` replaces the values of secrets in a record (run.json, the
W&B config, a benchmark's manifest) and `redact_text` the credentials in a text (a log line, an error, a
report), keeping every name. What counts as a secret:

- the credentials of a URL (`http://user:pass@host/v1` -> `http://<redacted>@host/v1`), anywhere in a text;
- the value of a key named like a secret: a word of its name (split at `_`, `-`, `.` and case changes) is
  one of `SECRET_WORDS` (`api_key`, `HF_TOKEN`, `password`, `Authorization`, ...; not `max_tokens`);
- every value of an `env` or `headers` table (an MCP server's environment is where tokens go);
- the argument after a command-line flag named like a secret (`--api-key X`, `--token=X`).

A value from the environment that none of these catch is not written either: records hold the names of
variables (`api_key_env`, `pass_env`), never their values.
"""

from __future__ import annotations

import logging
import re
from typing import Any

REDACTED = "<redacted>"
"""What a secret's value is replaced with."""
SECRET_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials", "authorization", "auth"}
)
"""Words that make a name a secret's."""
NAMES_ONLY = frozenset({"api_key_env", "pass_env"})
"""Keys named like a secret's that hold the names of environment variables, not their values."""
SECRET_VALUES = frozenset({"env", "headers"})
"""Keys whose value is a table of secrets (environment variables, HTTP headers): each of its values is
redacted, its names kept."""
_URL_CREDENTIALS = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<credentials>[^/\s@:]*:?[^/\s@]*)@")
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def is_secret_name(name: str) -> bool:
    """Whether a key or flag named `name` holds a secret (see the module's docstring)."""
    if name.lower().lstrip("-") in NAMES_ONLY:
        return False
    return any(word.lower() in SECRET_WORDS for word in _WORD.findall(name))


def redact_text(text: str) -> str:
    """`text` with the credentials of every URL in it replaced."""
    return _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)


def redacted(value: Any) -> Any:
    """A copy of a JSON-like `value` (dicts, lists, strings, numbers) with every secret in it replaced by
    `REDACTED`: the values of secret-named keys, of `env` tables and of secret-named flags, and URL
    credentials in every string. Names (keys) are kept."""
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for name, item in value.items():
            if isinstance(name, str) and name in SECRET_VALUES and isinstance(item, dict):
                out[name] = {k: REDACTED for k in item}
            elif isinstance(name, str) and is_secret_name(name) and item not in (None, "", [], {}):
                out[name] = REDACTED
            else:
                out[name] = redacted(item)
        return out
    if isinstance(value, list | tuple):
        return _redacted_arguments([redacted(item) for item in value])
    if isinstance(value, str):
        return redact_text(value)
    return value


def _redacted_arguments(items: list[Any]) -> list[Any]:
    """A list as a command line: the argument after a secret-named flag (`--api-key X`), or after its `=`."""
    out = list(items)
    for index, item in enumerate(items):
        if not (isinstance(item, str) and item.startswith("-")):
            continue
        flag, equals, _ = item.partition("=")
        if not is_secret_name(flag):
            continue
        if equals:
            out[index] = f"{flag}={REDACTED}"
        elif index + 1 < len(items) and isinstance(items[index + 1], str):
            out[index + 1] = REDACTED
    return out


class RedactingFilter(logging.Filter):
    """A logging filter that replaces URL credentials in each record's message (its arguments merged in)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact_text(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True
