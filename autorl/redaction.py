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

- by its value's shape, wherever it stands: provider tokens by their prefix (`sk-`, `sk-ant-`, `hf_`, `ghp_`,
  `github_pat_`, `xoxb-`, `AKIA`, `sk_live_`, `AIza`), 40 hex digits (a W&B key), JWTs, PEM private key blocks,
  random keys (`looks_random`), `-u user:password`, `--password X` and `-pX`, every pair of a Cookie header.
  Placeholders, variables' names and short words after `NAME:` are prose, kept (`api_key=TOKEN`, "the token: set").

A value from the environment that none of these catch is not written either: records hold the names of
variables (`api_key_env`, `pass_env`), never their values.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
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
SECRET_ENDINGS = ("password", "passwd", "secret", "token", "apikey")
"""How a name written as one word ends when it is a secret's (`PGPASSWORD`, `MYSQL_PWD` has its own word)."""
NAMES_A_PLACE = frozenset({"file", "path", "dir", "env"})
"""Last words of a name whose value says where a secret is, not what it is (`--token-file`, `api_key_env`)."""
NAMES_ONLY = frozenset({"api_key_env", "pass_env"})
"""Keys named like a secret's that hold the names of environment variables, not their values."""
SECRET_VALUES = frozenset({"env", "headers"})
"""Keys whose value is a table of secrets (environment variables, HTTP headers): each of its values is
redacted, its names kept."""
SECRET_SHORT_FLAGS = frozenset({"-k", "-p"})
"""Short flags whose argument is a secret (a key, a password) in the commands MCP servers and tools run."""
USER_FLAGS = frozenset({"-u", "--user"})
"""Flags whose argument is `user:password` (curl's): the password is redacted, the user kept."""
HEADER_FLAGS = frozenset({"-H", "--header"})
"""Flags whose argument is an HTTP header (`Name: value`): its value is redacted, its name kept."""
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s\"'<>`]+")
_URL_CREDENTIALS = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<credentials>[^/?#\s]*)@")
"""A URL's userinfo, to the last `@` of its authority (a password may hold an `@`)."""
_PARAMETER = re.compile(r"(?P<name>[^=&;#?]*)=(?P<value>[^&;#]+)")
_AUTH_SCHEME = re.compile(
    r"\b(?:(?P<bearer>Bearer)\s+(?=[^\s\"',;<]*[A-Za-z0-9])[^\s\"',;<]+|(?P<basic>Basic)\s+(?=[^\s\"',;<]*[0-9=])[^\s\"',;<]{8,})",
    re.IGNORECASE,
)
_AUTH_HEADER = re.compile(
    r"\b(?P<head>(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?[A-Za-z]+)\s+(?=[^\s\"',;<]*[A-Za-z0-9])[^\s\"',;<]+",
    re.IGNORECASE,
)
"""An Authorization header's `scheme credentials`: the credentials whatever their alphabet."""
_ASSIGNMENT = re.compile(
    r"(?P<name>\b[A-Za-z_][\w.-]*)(?P<quote>[\"']?)(?P<sep>\s*[:=]\s*)"
    r"(?:(?P<open>[\"'])(?P<quoted>(?:(?!(?P=open))[^\n])+)(?=(?P=open))"
    r"|(?P<value>[^\s\"',&<>]+(?:[ \t]+[^\s\"',&<>=:-][^\s\"',&<>=]*)*))"
)
"""`NAME=value` or `NAME: value`: a quoted value to its closing quote, else its words to one that is itself an
assignment or a flag (a secret-named `=` value takes them all: `passphrase=correct horse`)."""
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9]*_[A-Z0-9_]+")
_METAVAR = re.compile(r"[A-Z][A-Z_]*|[A-Z][A-Z0-9]*_[A-Z0-9_]+")
"""A flag's value that names a value (`--token-file FILE`) or a variable (`--api-key-env OPENAI_API_KEY`)."""
_PLAIN_WORD = re.compile(r"[A-Za-z]{1,7}")
"""A value after `NAME:` kept as prose ("the token: set AUTORL_TOKEN"): a short word of letters alone."""
_PEM = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL,
)
"""A PEM (or PGP armored) private key block, its lines joined by newlines or by `\\n` (JSON: a GCP service account's
`private_key`), to its end or the text's."""
_VALUE_SHAPES = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"sk-(?:proj-|ant-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"  # OpenAI, Anthropic
    r"|[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"  # Stripe
    r"|hf_[A-Za-z0-9]{30,}"  # Hugging Face
    r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,}"  # GitHub
    r"|xox[abposre]-[A-Za-z0-9-]{10,}|xapp-[A-Za-z0-9-]{10,}"  # Slack (bot, user, app-level)
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab personal access token
    r"|whsec_[A-Za-z0-9+/=]{20,}"  # a webhook signing secret (Stripe, Svix)
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key id
    r"|AIza[0-9A-Za-z_-]{35}"  # Google API key
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # a JWT
    r"|[0-9a-f]{40}"  # W&B's API key (40 hex digits; autorl's own digests are 16, 20 and 64)
    r")(?![A-Za-z0-9])"
)
"""Secrets known by their prefix or shape, wherever they stand."""
_RANDOM_CANDIDATE = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/=_-]{32,}(?![A-Za-z0-9+/=_-])")
_QUOTED = r"(?P<q>[\"'])(?:(?!(?P=q))[^\n])*(?P=q)"
"""A quoted value, to its closing quote."""
_USER_FLAG = re.compile(
    r"(?<![\w-])(?P<flag>-u(?:\s+|=)?|--user(?:\s+|=))"
    r"(?:(?P<q>[\"'])(?P<quoted>[^\s:\"']+:(?:(?!(?P=q))[^\n])+)(?P=q)|(?P<credentials>[^\s:\"']+:[^\s\"']+))"
)
"""`curl -u user:password`, `-uuser:password`, `-u 'user:password'`: the password (the user name kept)."""
_SECRET_FLAG = re.compile(
    rf"(?<![\w-])(?P<flag>--?[A-Za-z][\w-]*)(?P<sep>\s+|=)(?P<value>{_QUOTED}|[^\s\"'<>-][^\s\"'<>]*)"
)
"""A flag and its value, quoted or not, in free text (`--password X`, `--token 'X'`; `-pX` is `_SHORT_PASSWORD`'s)."""
_SHORT_PASSWORD = re.compile(rf"(?<![\w-])-p(?P<value>{_QUOTED}|[^\s\"'<>]{{4,}})")
"""MySQL's `-pPASSWORD` (or `-p"PASSWORD"`): the value written against the flag."""
_FLAG = re.compile(r"--?[A-Za-z][\w-]*")
"""A command line's flag, with nothing written against it (`-uuser:pass` is a flag and its value)."""
_TOKEN_ALPHABET = re.compile(r"[A-Za-z0-9_\-.~+=]{20,}")
_COOKIE = re.compile(r"(?P<head>\b(?:set-)?cookie[\"']?\s*:\s*[\"']?)(?P<pairs>[^\"'\n]+)", re.IGNORECASE)
"""A Cookie (or Set-Cookie) header: the value of every pair in it."""
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def is_secret_name(name: str) -> bool:
    """Whether a key or flag named `name` holds a secret (see the module's docstring)."""
    words = [word.lower() for word in _WORD.findall(name)]
    if name.lower().lstrip("-") in NAMES_ONLY or (words and words[-1] in NAMES_A_PLACE):
        return False
    return any(word in SECRET_WORDS for word in words) or name.lower().endswith(SECRET_ENDINGS)


def looks_like_token(segment: str) -> bool:
    """Whether a URL's path segment looks like a token: 20+ characters of a token's alphabet, letters and
    digits both, with a run of 16+ not broken by `-`, `_`, `.` or `~` (a name's parts are shorter)."""
    if not _TOKEN_ALPHABET.fullmatch(segment):
        return False
    longest = max(len(part) for part in re.split(r"[-_.~]", segment))
    return longest >= 16 and any(c.isdigit() for c in segment) and any(c.isalpha() for c in segment)


def _redacted_url(url: str) -> str:
    """`url` with its credentials, parameters' values and token-like path segments redacted, and then what the
    rules for words find in it past its scheme (`http://h:8000,api_key=X`, `http://h/v1&OPENAI_API_KEY=X`: a
    URL ends at whitespace or a quote, so text written against it is read as part of it)."""
    url = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{REDACTED}@", url)
    cut = min((i for i in (url.find("?"), url.find("#")) if i >= 0), default=len(url))
    head, tail = url[:cut], url[cut:]
    scheme, _, rest = head.partition("://")
    host, slash, path = rest.partition("/")
    path = "/".join(REDACTED if looks_like_token(segment) else segment for segment in path.split("/"))
    tail = _PARAMETER.sub(lambda m: f"{m['name']}={REDACTED}", tail)
    return f"{scheme}://{_redacted_words(f'{host}{slash}{path}{tail}')}"


def looks_random(word: str) -> bool:
    """Whether a 32+ character word of a key's alphabet is random: upper case, lower case and digits in it, and
    a run of 16+ without `-`, `_`, `.`, `/`, at most two `/`, and 4.2+ bits of entropy per character (an AWS
    secret key, a base64 token; paths, model names and hex digests are not)."""
    if not (any(c.isupper() for c in word) and any(c.islower() for c in word) and any(c.isdigit() for c in word)):
        return False
    if word.count("/") > 2 or max(len(part) for part in re.split(r"[-_./]", word)) < 16:
        return False
    counts = [word.count(c) for c in set(word)]
    return -sum(n / len(word) * math.log2(n / len(word)) for n in counts) >= 4.2


def _redacted_assignment(match: re.Match[str]) -> str:
    name, equals = match["name"], match["sep"].strip() == "="
    value = match["quoted"] if match["open"] else match["value"]
    first, space, rest = value.partition(" ") if not match["open"] else (value, "", "")
    if REDACTED in value or match.string.startswith(REDACTED, match.end()):
        return match[0]
    if not (is_secret_name(name) or (equals and _ENV_NAME.fullmatch(name))):
        return match[0]
    if _METAVAR.fullmatch(first.rstrip(").,;:`")) or (not equals and _PLAIN_WORD.fullmatch(first)):
        return match[0]  # a placeholder or a variable's name, or prose ("the token: set ..."): not a value
    head = f"{name}{match['quote']}{match['sep']}{match['open'] or ''}{REDACTED}"
    # a secret's `=` value is all its words (`passphrase=correct horse`); otherwise the words after its first
    # are what follows it (`HOME=/root ls`, "the password: hunter2 was refused")
    return head if match["open"] or (equals and is_secret_name(name)) else f"{head}{space}{rest}"


def redact_text(text: str) -> str:
    """`text` with every secret the module's rules find replaced: in URLs, after an auth scheme, and the
    values of secret-named or environment-variable assignments."""
    out, end = [], 0
    for url in _URL.finditer(text):  # a URL's parts (`host:port`) are not assignments
        out += [_redacted_words(text[end : url.start()]), _redacted_url(url[0])]
        end = url.end()
    return "".join([*out, _redacted_words(text[end:])])


def _redacted_words(text: str) -> str:
    text = _PEM.sub(REDACTED, text)
    text = _VALUE_SHAPES.sub(REDACTED, text)
    text = _RANDOM_CANDIDATE.sub(lambda m: REDACTED if looks_random(m[0]) else m[0], text)
    text = _AUTH_HEADER.sub(lambda m: f"{m['head']} {REDACTED}", text)
    text = _AUTH_SCHEME.sub(lambda m: f"{m['bearer'] or m['basic']} {REDACTED}", text)
    text = _USER_FLAG.sub(_redacted_user_flag, text)
    text = _SECRET_FLAG.sub(_redacted_flag, text)
    text = _SHORT_PASSWORD.sub(lambda m: f"-p{m['q'] or ''}{REDACTED}{m['q'] or ''}", text)
    text = _COOKIE.sub(_redacted_cookie, text)
    return _ASSIGNMENT.sub(_redacted_assignment, text)


def _redacted_user_flag(match: re.Match[str]) -> str:
    if match["q"]:
        return f"{match['flag']}{match['q']}{_redacted_user(match['quoted'])}{match['q']}"
    return f"{match['flag']}{_redacted_user(match['credentials'])}"


def _redacted_flag(match: re.Match[str]) -> str:
    quote = match["q"] or ""
    value = match["value"].strip(quote).rstrip(").,;:`")
    if not is_secret_name(match["flag"]) or value == REDACTED or _METAVAR.fullmatch(value):
        return match[0]
    return f"{match['flag']}{match['sep']}{quote}{REDACTED}{quote}"


def _redacted_cookie(match: re.Match[str]) -> str:
    pairs = _PARAMETER.sub(lambda m: f"{m['name']}={REDACTED}", match["pairs"])
    return f"{match['head']}{pairs}"


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
    `=`; a header's value after `-H` / `--header`; the password of `-u user:password`."""
    out = list(items)
    for index, item in enumerate(items):
        if not (isinstance(item, str) and item.startswith("-")):
            continue
        flag, equals, value = item.partition("=")
        if not _FLAG.fullmatch(flag) or (redact := _value_redactor(flag)) is None:
            continue
        if equals:
            out[index] = f"{flag}={redact(value)}"
        elif index + 1 < len(items) and isinstance(items[index + 1], str):
            out[index + 1] = redact(items[index + 1])
    return out


def _value_redactor(flag: str) -> Callable[[str], str] | None:
    """How the value of `flag` is redacted, or None when it is not a secret's."""
    if flag in USER_FLAGS:
        return _redacted_user
    if flag in HEADER_FLAGS:
        return _redacted_header
    if is_secret_name(flag) or flag in SECRET_SHORT_FLAGS:
        return lambda _: REDACTED
    return None


def _redacted_user(credentials: str) -> str:
    """`user:password` with its password redacted; a user alone (`-u` of another command) as it is."""
    user, colon, _ = credentials.partition(":")
    return f"{user}:{REDACTED}" if colon else credentials


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
