"""The two tools of `offices_mcp.toml`, which a question needs in sequence: `find_employee` gives an employee's id,
and only `get_office`, given that id, gives the office (building and room). Served over MCP by
`offices_server.py`; each id and office is drawn from a hash of `SEED` and the name, so no model has seen them.
`judges.offices_mcp` scores an answer against them.
"""

from __future__ import annotations

import hashlib
import re

EMPLOYEES = (
    "Ada Park", "Bruno Vela", "Carmen Holt", "Dario Finch", "Elena Marsh", "Farid Osei", "Greta Lund",
    "Hugo Brandt", "Ines Castillo", "Jonas Weber", "Kira Novak", "Luca Ferri", "Maya Okafor", "Nils Berg",
    "Olga Sokol", "Pablo Reyes", "Quinn Harlow", "Rosa Lindqvist", "Samir Haddad", "Tara Quigley",
)  # fmt: skip
"""Everyone in the company (invented names; the first 20 of `directory.EMPLOYEES`: this module imports nothing,
as the server runs it from its own directory)."""
SEED = "autorl-offices-1"
"""What the ids and offices are drawn from."""
OFFICE = re.compile(r"\b[A-D]\d-\d{3}\b")
"""An office as `get_office` writes it: building letter and floor, then the room (`B3-214`)."""
FIND, GET = "find_employee", "get_office"


def _digest(name: str, purpose: str) -> bytes:
    return hashlib.sha256(f"{SEED}:{purpose}:{name}".encode()).digest()


def _known(name: str) -> str | None:
    wanted = " ".join(name.split()).casefold()
    return next((known for known in EMPLOYEES if known.casefold() == wanted), None)


def employee_id(name: str) -> str | None:
    """The id of employee `name` (case and spacing aside), None for someone not in the directory."""
    known = _known(name)
    return None if known is None else "E" + _digest(known, "id").hex()[:5].upper()


_BY_ID = {employee_id(name): name for name in EMPLOYEES}


def office(name: str) -> str | None:
    """The office of employee `name`, None for someone not in the directory."""
    known = _known(name)
    if known is None:
        return None
    digest = _digest(known, "office")
    floor = 1 + digest[1] % 5
    return f"{'ABCD'[digest[0] % 4]}{floor}-{floor}{digest[2] % 40:02d}"


def find_employee(name: str) -> str:
    """Find an employee of the company by full name and return their employee id.

    Args:
        name: The employee's full name, e.g. 'Jane Doe'.
    """
    found = employee_id(name)
    if found is None:
        raise ValueError(f"no employee named {name!r}")
    return f"{_known(name)}: employee id {found}"


def get_office(employee_id: str) -> str:
    """Return the office (building and room) of the employee with this employee id (find the id with find_employee).

    Args:
        employee_id: The employee id, e.g. 'E1A2B3'.
    """
    name = _BY_ID.get(employee_id.strip().upper())
    if name is None:
        raise ValueError(f"no employee with id {employee_id!r}; find_employee gives an employee's id")
    return f"employee {employee_id.strip().upper()}: office {office(name)}"
