"""A notes store as an MCP server: the tools of the `notes.toml` example task.

Tools: `add_note(title, text)`, `search_notes(query)`, `list_notes()`; resource `notes://recent`.
Notes live in SQLite at `$NOTES_DB` (default `notes.sqlite` in the working directory; `:memory:` keeps
them for the server's lifetime only). One store serves every call, so during training the rollouts
share it: a search may find what another rollout saved.

    python notes_server.py               # MCP over stdin/stdout (how autorl starts it)
    python notes_server.py --http 8765   # streamable HTTP at http://127.0.0.1:8765/mcp
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import threading

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

app = MCPServer("notes", instructions="A personal notes store: save notes, search them, list the latest.")

_db = sqlite3.connect(os.environ.get("NOTES_DB", "notes.sqlite"), check_same_thread=False)
_db.execute(
    "CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, title TEXT NOT NULL, text TEXT NOT NULL,"
    " created TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)"
)
_lock = threading.Lock()  # sync tools run in worker threads


def _notes(sql: str, *args: object) -> str:
    """The notes a query selects, one per line, or a line saying there are none."""
    with _lock:
        rows = _db.execute(sql, args).fetchall()
    lines = [f"[{note_id}] {title}: {text} ({created})" for note_id, title, text, created in rows]
    return "\n".join(lines) or "no notes found"


@app.tool()
def add_note(title: str, text: str) -> str:
    """Save a note with a short title and its text; returns the new note's id."""
    if not title.strip() or not text.strip():
        raise ToolError("a note needs a non-empty title and text")
    with _lock, _db:
        note_id = _db.execute("INSERT INTO notes (title, text) VALUES (?, ?)", (title.strip(), text.strip())).lastrowid
    return f"saved note {note_id}: {title.strip()}"


@app.tool()
def search_notes(query: str, limit: int = 5) -> str:
    """Find notes whose title or text contains every word of the query (case-insensitive), newest first."""
    words = query.lower().split()
    if not words:
        raise ToolError("the query is empty")
    where = " AND ".join(["lower(title || ' ' || text) LIKE ?"] * len(words))
    return _notes(
        f"SELECT id, title, text, created FROM notes WHERE {where} ORDER BY id DESC LIMIT ?",
        *[f"%{word}%" for word in words],
        max(1, min(limit, 50)),
    )


@app.tool()
def list_notes(limit: int = 10) -> str:
    """The latest notes, newest first."""
    return _notes("SELECT id, title, text, created FROM notes ORDER BY id DESC LIMIT ?", max(1, min(limit, 50)))


@app.resource("notes://recent", name="recent notes", description="The 10 latest notes as text.")
def recent_notes() -> str:
    return _notes("SELECT id, title, text, created FROM notes ORDER BY id DESC LIMIT 10")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT")
    options = parser.parse_args()
    if options.http:
        app.run("streamable-http", host="127.0.0.1", port=options.http)
    else:
        app.run()
