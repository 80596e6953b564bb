"""Security findings about redaction by what a secret looks like: provider tokens by their prefix, random keys by
their entropy, PEM blocks, the password of `curl -u` / `--password` / `-p`, every pair of a Cookie header, each
found in free text (a log line, an error, a tool's output); and the prose and names around them kept."""

from __future__ import annotations

import json
import random
import string

import pytest

from autorl.redaction import REDACTED, redact_text, redacted

RANDOM = random.Random(59)


def chars(count: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    return "".join(RANDOM.choice(alphabet) for _ in range(count))


HEX = "0123456789abcdef"
PEM_BODY = "\n".join(chars(64, string.ascii_letters + string.digits + "+/") for _ in range(4))
SHAPES = {  # where {s} goes the secret; made here, so no real-looking key is committed
    "openai project key": ("OPENAI said: bad key sk-proj-{s}", "sk-proj-" + chars(48)),
    "openai key": ("using sk-{s} now", chars(48)),
    "anthropic key": ("x-api-key sk-ant-api03-{s}", chars(40) + "-" + chars(20)),
    "hugging face token": ("login hf_{s}", chars(34)),
    "github classic token": ("git clone https://github.com/x/y with ghp_{s}", chars(36)),
    "github fine-grained token": ("github_pat_{s}", chars(22) + "_" + chars(59)),
    "slack bot token": ("SLACK xoxb-{s}", "1234567890-" + chars(24)),
    "aws access key id": ("AKIA{s} in the log", chars(16, string.ascii_uppercase + string.digits)),
    "aws secret access key": ("keys: AKIAEXAMPLE / {s}", chars(40, string.ascii_letters + string.digits + "+")),
    "stripe live key": ("charge with sk_live_{s}", chars(32)),
    "google api key": ("?q=1 AIza{s}", chars(35)),
    "wandb api key": ("wandb login {s}", chars(40, HEX)),
    "jwt": ("token eyJhbGciOiJIUzI1NiJ9.eyJ{s}.sig", chars(24) + "." + chars(43)),
    "pem private key": ("-----BEGIN PRIVATE KEY-----\n{s}\n-----END PRIVATE KEY-----", PEM_BODY),
    "pem in json": (
        '{{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\n{s}\\n-----END PRIVATE KEY-----\\n"}}',
        PEM_BODY.replace("\n", "\\n"),
    ),
    "rsa pem block cut off": ("-----BEGIN RSA PRIVATE KEY-----\n{s}", PEM_BODY),
    "curl -u": ("curl -u admin:{s} https://x", chars(12)),
    "curl --user=": ("curl --user=admin:{s} https://x", chars(12)),
    "--password": ("mysql --password {s} -h db", chars(12)),
    "--password=": ("psql --password={s}", chars(12)),
    "mysql -p": ("mysql -uroot -p{s} db", chars(12)),
    "PGPASSWORD": ("PGPASSWORD={s} psql", chars(12)),
    "DB_PASSWORD": ("export DB_PASSWORD={s}", chars(12)),
    "cookie header": ("Cookie: theme=dark; session={s}; csrftoken=abc", chars(32)),
    "set-cookie header": ("Set-Cookie: sid={s}; Path=/; HttpOnly", chars(32)),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_security_a_secret_is_redacted_by_its_shape(shape):
    text, secret = SHAPES[shape]
    planted = text.format(s=secret)
    clean = redact_text(planted)
    assert secret not in clean and REDACTED in clean, (planted, clean)
    assert secret not in json.dumps(redacted({"log": planted, "args": planted.split()}))


def test_security_every_pair_of_a_cookie_header_is_redacted_and_the_names_kept():
    assert redact_text("Cookie: theme=dark; session=abc123") == "Cookie: theme=<redacted>; session=<redacted>"
    assert redact_text("curl -u admin:hunter22 x") == "curl -u admin:<redacted> x"


KEPT = [
    "refused the token: set AUTORL_TOKEN to the server's",
    "autorl serve: http://127.0.0.1:7999 (OpenAI-compatible at http://127.0.0.1:7999/v1); the token from AUTORL_TOKEN",
    "autorl serve: http://127.0.0.1:7999 (OpenAI-compatible at http://127.0.0.1:7999/v1); the token from /home/u/.autorl/serve/token",
    "--max-tokens 128 --max-model-len 2048 --lora-rank 8",
    "give --token-file FILE, or set AUTORL_TOKEN",
    "HuggingFaceTB/SmolLM2-135M-Instruct",
    "embedded:smollm2-135m",
    "/tmp/pytest-of-root/pytest-90/test_a_run_record_and_the_wand0/runs/reply-politely-9aa0f2ae/checkpoints/0003",
    "key 3f5a9c0e1b2d4f6a8c0e (stage inputs)",  # a stage key: 20 hex digits
    "sha256 " + "ab" * 32,
    "run 2f1e0b4c-5d6a-4e7f-8a9b-0c1d2e3f4a5b",
    "docker run -p 8000:8000 image",
    "mkdir -p /tmp/x && git --no-pager log",
    "ValueError: max_completion_tokens must be at most 8192",
    "a task-specific system prompt for the skills-based agent",
    "Basic arithmetic, please",
    "Train and serve models for programs on other machines: `autorl.RemoteBackend(URL, api_key=TOKEN)`.",
    "the token every client must send (Authorization: Bearer ...); unset: AUTORL_TOKEN",
    "--api-key-env OPENAI_API_KEY --token TOKEN",
]


@pytest.mark.parametrize("text", KEPT)
def test_security_prose_names_paths_and_digests_are_not_redacted(text):
    assert redact_text(text) == text


QUOTED_AND_ATTACHED = {  # security round 4: each kept its secret (or part of it) before
    'mysql --password "hunter2" -h db': 'mysql --password "<redacted>" -h db',
    'tool --api-key "sk-abc123"': 'tool --api-key "<redacted>"',
    "tool --token 'abc123def' next": "tool --token '<redacted>' next",
    "curl -ualice:hunter2 https://x": "curl -ualice:<redacted> https://x",
    "curl -u 'alice:hunter2' https://x": "curl -u 'alice:<redacted>' https://x",
    'mysql -p"secret99" db': 'mysql -p"<redacted>" db',
    "-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBGX0abc\n-----END PGP PRIVATE KEY BLOCK-----": "<redacted>",
    "judge at http://localhost:8000,api_key=hunter2hunter2": "judge at http://localhost:8000,api_key=<redacted>",
    "OPENAI_BASE_URL=http://h/v1&OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwx1234": (
        "OPENAI_BASE_URL=http://h/v1&OPENAI_API_KEY=<redacted>"
    ),
    "postgresql://user:p@ssw0rd@localhost/db": "postgresql://<redacted>@localhost/db",
    "FOO_PASSWORD=hun;ter2": "FOO_PASSWORD=<redacted>",
    "export FOO_PASSWORD='hunter 2 with spaces'": "export FOO_PASSWORD='<redacted>'",
    "passphrase=correct horse": "passphrase=<redacted>",
    "MY_HOME=/root ls -la": "MY_HOME=<redacted> ls -la",
}


@pytest.mark.parametrize("text", QUOTED_AND_ATTACHED)
def test_security_quoted_attached_and_url_embedded_secrets_are_redacted_whole(text):
    assert redact_text(text) == QUOTED_AND_ATTACHED[text]


@pytest.mark.parametrize("prefix", ["xapp-1-A0123456789-", "glpat-", "whsec_"])
def test_security_slack_app_gitlab_and_webhook_secrets_are_redacted_by_their_prefix(prefix):
    secret = prefix + chars(24)  # under 32: not caught as a random key
    clean = redact_text(f"the token was {secret}.")
    assert secret not in clean and REDACTED in clean, clean


def test_security_a_user_password_argument_is_redacted_and_the_flag_after_it_kept():
    assert redacted(["curl", "-uuser:pass", "--user", "u:p", "--verbose"]) == [
        "curl",
        "-uuser:<redacted>",
        "--user",
        "u:<redacted>",
        "--verbose",
    ]
