"""Secrets kept out of what autorl writes: `redacted` replaces the values of secrets in a record (run.json, the
W&B config, a benchmark's manifest) and `redact_text` the secrets in a text (a log line, an error, a report,
every string of a record), keeping every name. The rules go by the shape of a value, not by a list of keys:

- in a URL (anywhere in a text): its credentials (`http://user:pass@host` -> `http://<redacted>@host`), the
  value of every query and fragment parameter (`?api_key=X&v=1` -> `?api_key=<redacted>&v=<redacted>`), and a
  path segment that looks like a token (`looks_like_token`: 20+ characters of a token's alphabet, letters
  and digits, one run of 16+ without a separator; model names such as `SmolLM2-135M-Instruct` are not);
- a credential after an HTTP auth scheme (`Bearer X`; `Basic X` when X (8+ characters) has a digit or `=`, so
  "Basic arithmetic" stays; after `Authorization: SCHEME`, always);
- `NAME: value` and `NAME=value` (quoted or not, as in a header, an environment assignment `env
  OPENAI_API_KEY=X`, `sh -c "TOKEN=X ..."`, or JSON in a string) when NAME is named like a secret: a word of
  it (split at `_`, `-`, `.` and case changes) is one of `SECRET_WORDS` (`api_key`, `HF_TOKEN`, `password`,
  `Authorization`, ...; not `max_tokens`); and every `UPPER_CASE=value` assignment (an environment variable's);
- the value of a key named like a secret, and every value of an `env` or `headers` table;
- in a list read as a command line: the argument after a flag named like a secret (`--api-key X`, `--token=X`,
  `--key X`), after `-k` or `-p` (curl's key, a client's password), and the value of the header after `-H` or
  `--header` (`-H "X-Team: X"` -> `-H "X-Team: <redacted>"`).

A value from the environment that none of these catch is not written either: records hold the names of
variables (`api_key_env`, `pass_env`), never their values.
"""

from __future__ import annotations

import logging
import re
from typing import Any, TextIO

REDACTED = "<redacted>"
"""What a secret's value is replaced with."""
SECRET_WORDS = frozenset(
    {
        "key", "apikey", "token", "secret", "password", "passwd", "pass", "pwd", "passphrase", "credential",
        "credentials", "cred", "creds", "authorization", "auth", "bearer", "cookie", "jwt", "signature", "sig",
    }
)  # fmt: skip
"""Words that make a name a secret's."""
NAMES_ONLY = frozenset({"api_key_env", "pass_env"})
"""Keys named like a secret's that hold the names of environment variables, not their values."""
SECRET_VALUES = frozenset({"env", "headers"})
"""Keys whose value is a table of secrets (environment variables, HTTP headers): each of its values is
redacted, its names kept."""
SECRET_SHORT_FLAGS = frozenset({"-k", "-p"})
"""Short flags whose argument is a secret (a key, a password) in the commands MCP servers and tools run."""
HEADER_FLAGS = frozenset({"-H", "--header"})
"""Flags whose argument is an HTTP header (`Name: value`): its value is redacted, its name kept."""
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s\"'<>`]+")
_URL_CREDENTIALS = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<credentials>[^/\s@:]*:?[^/\s@]*)@")
_PARAMETER = re.compile(r"(?P<name>[^=&;#?]*)=(?P<value>[^&;#]+)")
_AUTH_SCHEME = re.compile(
    r"\b(?:(?P<bearer>Bearer)\s+[^\s\"',;<]+|(?P<basic>Basic)\s+(?=[^\s\"',;<]*[0-9=])[^\s\"',;<]{8,})",
    re.IGNORECASE,
)
_AUTH_HEADER = re.compile(
    r"\b(?P<head>(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?[A-Za-z]+)\s+[^\s\"',;<]+", re.IGNORECASE
)
"""An Authorization header's `scheme credentials`: the credentials whatever their alphabet."""
_ASSIGNMENT = re.compile(
    r"(?P<name>\b[A-Za-z_][\w.-]*)(?P<quote>[\"']?)(?P<sep>\s*[:=]\s*)(?P<open>[\"']?)(?P<value>[^\s\"',;&<>]+)"
)
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9]*_[A-Z0-9_]+")
_TOKEN_ALPHABET = re.compile(r"[A-Za-z0-9_\-.~+=]{20,}")
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def is_secret_name(name: str) -> bool:
    """Whether a key or flag named `name` holds a secret (see the module's docstring)."""
    if name.lower().lstrip("-") in NAMES_ONLY:
        return False
    return any(word.lower() in SECRET_WORDS for word in _WORD.findall(name))


def looks_like_token(segment: str) -> bool:
    """Whether a URL's path segment looks like a token: 20+ characters of a token's alphabet, letters and
    digits both, with a run of 16+ not broken by `-`, `_`, `.` or `~` (a name's parts are shorter)."""
    if not _TOKEN_ALPHABET.fullmatch(segment):
        return False
    longest = max(len(part) for part in re.split(r"[-_.~]", segment))
    return longest >= 16 and any(c.isdigit() for c in segment) and any(c.isalpha() for c in segment)


def _redacted_url(url: str) -> str:
    url = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{REDACTED}@", url)
    cut = min((i for i in (url.find("?"), url.find("#")) if i >= 0), default=len(url))
    head, tail = url[:cut], url[cut:]
    scheme, _, rest = head.partition("://")
    host, slash, path = rest.partition("/")
    path = "/".join(REDACTED if looks_like_token(segment) else segment for segment in path.split("/"))
    tail = _PARAMETER.sub(lambda m: f"{m['name']}={REDACTED}", tail)
    return f"{scheme}://{host}{slash}{path}{tail}"


def _redacted_assignment(match: re.Match[str]) -> str:
    name, value = match["name"], match["value"]
    if value == REDACTED or not (is_secret_name(name) or (match["sep"].strip() == "=" and _ENV_NAME.fullmatch(name))):
        return match[0]
    return f"{name}{match['quote']}{match['sep']}{match['open']}{REDACTED}"


def redact_text(text: str) -> str:
    """`text` with every secret the module's rules find replaced: in URLs, after an auth scheme, and the
    values of secret-named or environment-variable assignments."""
    out, end = [], 0
    for url in _URL.finditer(text):  # a URL's parts (`host:port`) are not assignments
        out += [_redacted_words(text[end : url.start()]), _redacted_url(url[0])]
        end = url.end()
    return "".join([*out, _redacted_words(text[end:])])


def _redacted_words(text: str) -> str:
    text = _AUTH_HEADER.sub(lambda m: f"{m['head']} {REDACTED}", text)
    text = _AUTH_SCHEME.sub(lambda m: f"{m['bearer'] or m['basic']} {REDACTED}", text)
    return _ASSIGNMENT.sub(_redacted_assignment, text)


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
    """A list as a command line: the argument after a secret-named flag (`--api-key X`, `-k X`), or after its
    `=`; a header's value after `-H` / `--header`."""
    out = list(items)
    for index, item in enumerate(items):
        if not (isinstance(item, str) and item.startswith("-")):
            continue
        flag, equals, value = item.partition("=")
        following = index + 1 < len(items) and isinstance(items[index + 1], str)
        if flag in HEADER_FLAGS:
            if equals:
                out[index] = f"{flag}={_redacted_header(value)}"
            elif following:
                out[index + 1] = _redacted_header(items[index + 1])
        elif is_secret_name(flag) or flag in SECRET_SHORT_FLAGS:
            if equals:
                out[index] = f"{flag}={REDACTED}"
            elif following:
                out[index + 1] = REDACTED
    return out


def _redacted_header(header: str) -> str:
    """`Name: value` with its value redacted (any header: which carry credentials is the server's choice)."""
    name, colon, _ = header.partition(":")
    return f"{name}: {REDACTED}" if colon else REDACTED


class RedactingFilter(logging.Filter):
    """A logging filter that redacts each record's message (its arguments merged in), and the traceback and
    stack it carries (formatted here, so every handler's formatter prints the redacted text)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact_text(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info)
        return True


class RedactingStream:
    """A text stream that writes what it is given to `stream` with `redact_text` applied, and is `stream`
    for everything else (`isatty`, `encoding`, `fileno`): the `autorl` command puts it over sys.stdout and
    sys.stderr, so every line it prints (errors, tables, progress, log records and their tracebacks,
    uvicorn's) passes through redaction."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(redact_text(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)
