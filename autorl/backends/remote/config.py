"""`ServeConfig`: how `autorl serve` runs (its fields are the command's options), and where its token comes from.

A module of its own, light to import, so the CLI builds its options without loading FastAPI or the backend.
"""

from __future__ import annotations

import os
import secrets
import ssl
import stat
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ...atomic import private_dir
from ...errors import AutoRLError
from ...home import DEFAULT_HOME
from ...serving.config import LOOPBACK_HOSTS, ServerConfig
from .limits import ServeLimits
from .wire import DEFAULT_PORT, TOKEN_ENV

SERVE_DIR = "serve"
"""The server's own files under the home: `token` (when it made one), `models.json` (what it serves)."""
MODELS_DIR = "models"
"""The served models' run directories under the home: `models/<project>/<name>/`."""
MIN_TOKEN_CHARS = 16


class ServeConfig(BaseModel):
    """How `autorl serve` runs."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, allow_inf_nan=False)

    host: str = "127.0.0.1"
    """Interface to bind, loopback unless told; another (0.0.0.0: every interface) needs a token from --token-file
    or AUTORL_TOKEN, and TLS (--ssl-certfile and --ssl-keyfile, or a reverse proxy) on a network you do not
    trust: without it the token travels in clear, and the server says so when it starts."""
    port: int = Field(DEFAULT_PORT, ge=1, le=65535)
    """TCP port (ART's server's, 7999, by default)."""
    home: Path = DEFAULT_HOME
    """Where the served models' runs (models/PROJECT/NAME/) and the server's token live."""
    ssl_certfile: Path | None = None
    """Serve HTTPS with this certificate (PEM; a chain after it), with --ssl-keyfile; clients trust it through
    their system's CAs, or SSL_CERT_FILE naming it (a self-signed one)."""
    ssl_keyfile: Path | None = None
    """The private key of --ssl-certfile (PEM)."""
    token_file: Path | None = None
    """File holding the token every client must send (Authorization: Bearer ...); unset: AUTORL_TOKEN, else a
    token made once and kept in HOME/serve/token (mode 0600)."""
    max_body_mb: float = Field(64.0, gt=0, le=4096)
    """Largest request body accepted, in MiB, as sent and once a gzip body is inflated (a training step's
    groups); larger is refused (413) as soon as the bytes read pass it."""
    lease_s: float = Field(120.0, ge=0, le=86400)
    """Seconds after a client's last training step during which no other client may train that model (409);
    a client that closes its backend frees it at once."""
    server: ServerConfig = Field(default_factory=ServerConfig)
    """How each model's vLLM server starts (on loopback, behind this server)."""
    limits: ServeLimits = Field(default_factory=ServeLimits)
    """What clients may ask of this server: models, requests at once, each knob of a model (limits.py)."""

    @model_validator(mode="after")
    def _tls_files(self) -> ServeConfig:
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("--ssl-certfile and --ssl-keyfile go together: give both, or neither")
        for path in (self.ssl_certfile, self.ssl_keyfile):
            if path is not None and not path.is_file():
                raise ValueError(f"{path} is not a file")
        if self.ssl_certfile is not None and self.ssl_keyfile is not None:
            try:  # as uvicorn will load them, before anything starts; an encrypted key is refused, not prompted for
                context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
                context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile, password=lambda: b"")
            except (ssl.SSLError, OSError) as exc:
                raise ValueError(
                    f"{self.ssl_certfile} and {self.ssl_keyfile} are not a PEM certificate and its unencrypted key "
                    f"({exc.strerror or exc})"
                ) from None
        return self

    @property
    def tls(self) -> bool:
        return self.ssl_certfile is not None

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * 2**20)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    def uvicorn_options(self) -> dict[str, object]:
        """What uvicorn is started with: the address, TLS when given, quiet logs."""
        tls = {"ssl_certfile": str(self.ssl_certfile), "ssl_keyfile": str(self.ssl_keyfile)} if self.tls else {}
        return {"host": self.host, "port": self.port, "log_level": "warning", "access_log": False, **tls}

    def plain_http_warning(self) -> str | None:
        """The line a server on another interface than loopback without TLS says when it starts."""
        if self.tls or self.host in LOOPBACK_HOSTS:
            return None
        return (
            f"warning: {self.url} is plain HTTP on {self.host}, not loopback: the token and every request travel "
            "in clear; give --ssl-certfile and --ssl-keyfile, or put a TLS proxy in front"
        )

    def serve_dir(self) -> Path:
        """HOME/serve, made (private) when missing; one `AutoRLError` line when the home cannot hold it."""
        try:
            return private_dir(self.home / SERVE_DIR)
        except OSError as exc:
            raise AutoRLError(f"--home {self.home}: cannot make {SERVE_DIR}/ there ({exc.strerror})") from None


def resolve_token(config: ServeConfig) -> tuple[str, str]:
    """The token and where it came from (a file's path or the variable's name, never the token): --token-file,
    else AUTORL_TOKEN, else HOME/serve/token (made, mode 0600, when missing). A host other than loopback needs
    one of the first two: a token somebody chose to hand out. One `AutoRLError` line for what is wrong."""
    if config.token_file is not None:
        token, source = read_token_file(config.token_file), str(config.token_file)
    elif os.environ.get(TOKEN_ENV):
        token, source = os.environ[TOKEN_ENV].strip(), TOKEN_ENV
    elif config.host not in LOOPBACK_HOSTS:
        raise AutoRLError(
            f"--host {config.host} is not loopback: give the token clients must send with --token-file FILE "
            f"or {TOKEN_ENV} (make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    else:
        path = config.serve_dir() / "token"
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(32) + "\n")
        token, source = read_token_file(path), str(path)
    if len(token) < MIN_TOKEN_CHARS:
        raise AutoRLError(f"the token from {source} is shorter than {MIN_TOKEN_CHARS} characters; use a random one")
    return token, source


def read_token_file(path: Path) -> str:
    """The token in `path` (surrounding whitespace dropped); refused when others may read the file."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise AutoRLError(f"token file {path}: {exc.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise AutoRLError(f"token file {path} is readable by other users (mode {stat.S_IMODE(mode):o}); chmod 600 it")
    if not text:
        raise AutoRLError(f"token file {path} is empty")
    return text
