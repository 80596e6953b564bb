"""The `lookup_extension` tool of `directory.toml`: a made-up staff directory, so that a model can know an
employee's phone extension only by calling the tool.

The names are invented and each extension is drawn from a hash of `SEED` and the name: no model has seen
them, and `directory.jsonl` asks for the extension of names the directory holds. `judges.directory` checks an
answer against `extension`, the tool's own truth.
"""

from __future__ import annotations

import hashlib

SEED = "autorl-directory-1"
"""What the extensions are drawn from: another seed, another directory."""
EMPLOYEES = (
    "Ada Park", "Bruno Vela", "Carmen Holt", "Dario Finch", "Elena Marsh", "Farid Osei", "Greta Lund",
    "Hugo Brandt", "Ines Castillo", "Jonas Weber", "Kira Novak", "Luca Ferri", "Maya Okafor", "Nils Berg",
    "Olga Sokol", "Pablo Reyes", "Quinn Harlow", "Rosa Lindqvist", "Samir Haddad", "Tara Quigley",
    "Umar Siddiqui", "Vera Kowalski", "Wendell Price", "Ximena Duarte", "Yusuf Demir", "Zoe Whitfield",
    "Anton Rusu", "Bianca Moretti", "Cyrus Farahani", "Dalia Petrov", "Emil Strand", "Fiona Gallagher",
    "Gustavo Lima", "Hana Sato", "Igor Volkov", "Julia Brenner", "Kofi Mensah", "Lena Fischer",
    "Marco Bianchi", "Nadia Rahman",
)  # fmt: skip
"""Everyone in the directory (invented names)."""


def _key(name: str) -> str:
    return " ".join(name.split()).casefold()


_BY_KEY = {_key(name): name for name in EMPLOYEES}


def extension(name: str) -> int | None:
    """The four-digit extension of the employee `name` (case and spacing aside), None for someone not in the
    directory."""
    known = _BY_KEY.get(_key(name))
    if known is None:
        return None
    digest = hashlib.sha256(f"{SEED}:{known}".encode()).digest()
    return 1000 + int.from_bytes(digest[:4], "big") % 9000


def lookup_extension(name: str) -> str:
    """Look up an employee's phone extension in the company directory.

    Args:
        name: The employee's full name, e.g. 'Jane Doe'.
    """
    number = extension(name)
    if number is None:
        raise ValueError(f"no employee named {name!r} in the directory")
    return f"{_BY_KEY[_key(name)]}: extension {number}"
