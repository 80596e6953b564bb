"""Tools of real MCP servers (stdio child processes and streamable HTTP): listing, calls, error results,
timeouts, a server that dies (restarted once, then the run fails) and servers that never outlive autorl."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autorl.agents.tools import Toolbox
from autorl.errors import AutoRLError, McpServerDied
from autorl.task import McpServerSpec, TaskSpec, load_task
from tests.helpers.processes import children, wait_gone

REPO = Path(__file__).resolve().parents[1]
NOTES = REPO / "pipelines" / "tasks" / "notes_agent"

TEST_SERVER = '''
import os, time
from mcp.server.mcpserver import MCPServer

app = MCPServer("test")

@app.tool()
def echo(text: str) -> str:
    """Echo the text."""
    return text

@app.tool()
def nap(seconds: float) -> str:
    time.sleep(seconds)
    return "rested"

@app.tool()
def crash() -> str:
    os._exit(3)

@app.tool()
def crash_noticed_late() -> str:
    if os.fork() == 0:  # a child that keeps the server's pipes open: the client reads the death late
        time.sleep(2)
        os._exit(0)
    os._exit(3)

@app.tool()
def environment() -> dict:
    return dict(os.environ)

app.run()
'''


def notes_task(tmp_path: Path, **fields) -> TaskSpec:
    task = load_task(NOTES / "notes.toml")
    task.mcp_servers[0].env = {"NOTES_DB": str(tmp_path / "notes.sqlite")}
    return task.model_copy(update=fields)


def test_the_notes_server_lists_calls_and_reports_errors(tmp_path):
    before = children(os.getpid())

    async def scenario():
        # opened, called and closed by three different tasks: the mcp client's cancel scopes stay in its own task
        toolbox = await asyncio.create_task(Toolbox.open(notes_task(tmp_path), log_dir=tmp_path / "logs"))
        assert len(children(os.getpid()) - before) == 1
        calls = [
            ("add_note", '{"title": "plumber", "text": "Thursday 9am, 555-0134"}'),
            ("search_notes", '{"query": "PLUMBER thursday"}'),
            ("add_note", '{"title": " ", "text": "x"}'),
            ("add_note", '{"title": "no text"}'),
            ("search_notes", '{"query": "dentist"}'),
        ]
        results = [await asyncio.create_task(toolbox.call(name, arguments)) for name, arguments in calls]
        await asyncio.create_task(toolbox.aclose())
        return toolbox, results

    toolbox, results = asyncio.run(scenario())
    assert children(os.getpid()) == before  # the server is gone
    assert [entry["function"]["name"] for entry in toolbox.openai_tools()] == ["add_note", "search_notes", "list_notes"]
    assert toolbox.openai_tools()[0]["function"]["parameters"]["required"] == ["title", "text"]
    assert results[0] == "saved note 1: plumber"
    assert results[1].startswith("[1] plumber: Thursday 9am, 555-0134 (")
    assert results[2] == "error: Error executing tool add_note: a note needs a non-empty title and text"  # isError
    assert (
        results[3] == "error: invalid arguments for 'add_note': 'text' is a required property"
    )  # checked before the call
    assert results[4] == "no notes found"
    assert toolbox.calls == {"ok": 3, "error": 2}
    resources = "Resources of MCP server 'python notes_server.py':\n- notes://recent (recent notes): The 10 latest"
    assert resources in toolbox.describe()
    assert (tmp_path / "notes.sqlite").exists()  # the env of the task reached the server
    assert "Tool 'add_note' failed" in (tmp_path / "logs" / "mcp-0.log").read_text()  # the server's stderr


@pytest.fixture
def test_server(tmp_path: Path) -> TaskSpec:
    (tmp_path / "server.py").write_text(TEST_SERVER)
    server = McpServerSpec(command=["python", "server.py"], cwd=tmp_path)
    return TaskSpec(description="x", tool_timeout_s=0.5, mcp_servers=[server])


def test_a_slow_call_times_out_and_the_server_goes_on(test_server):
    async def scenario():
        async with await Toolbox.open(test_server) as toolbox:
            slow = await toolbox.call("nap", '{"seconds": 10}')
            return slow, await toolbox.call("echo", '{"text": "still here"}'), toolbox.server_failures

    slow, echo, failures = asyncio.run(scenario())
    assert slow == "error: 'nap' did not finish within 0.5 s"  # the deadline, not the nap, ended the call
    assert echo == "still here"
    assert failures == {"python server.py": 0}


def test_a_server_that_dies_is_restarted_once_then_the_run_fails(test_server):
    others = children(os.getpid())  # e.g. a server a session fixture of another test module started

    async def scenario():
        async with await Toolbox.open(test_server) as toolbox:
            first = children(os.getpid()) - others
            died = await toolbox.call("crash", "{}")
            after_restart = await toolbox.call("echo", '{"text": "back"}')
            second = children(os.getpid()) - others
            assert toolbox.server_failures == {"python server.py": 1}
            (pid,) = second
            os.kill(pid, signal.SIGKILL)  # killed from outside this time
            with pytest.raises(McpServerDied) as error:
                await toolbox.call("echo", '{"text": "again"}')
            with pytest.raises(McpServerDied):  # every later call of the server fails too
                await toolbox.call("echo", '{"text": "again"}')
            return first, second, died, after_restart, error.value, toolbox

    first, second, died, after_restart, error, toolbox = asyncio.run(scenario())
    assert died == "error: the server of tool 'crash' stopped during the call; it is being restarted"
    assert after_restart == "back"
    assert first != second  # a new process
    assert isinstance(error, AutoRLError) and "\n" not in str(error)
    assert str(error).startswith("MCP server 'python server.py' died again after it was restarted")
    assert toolbox.server_failures == {"python server.py": 2}
    assert toolbox.calls == {"ok": 1, "error": 1}  # the calls that raised returned nothing


def test_a_server_whose_death_is_noticed_after_the_deadline_died_and_did_not_time_out(test_server):
    """The tool timeout (0.5 s) passes before the client can read that the server died (a child of the server
    holds its pipes 2 s): a ping decides, so the call is the server's death, as when it is noticed at once
    (a loaded machine reads a closed pipe late), and the restarted server answers the next call."""

    async def scenario():
        async with await Toolbox.open(test_server) as toolbox:
            died = await toolbox.call("crash_noticed_late", "{}")
            return died, await toolbox.call("echo", '{"text": "back"}'), toolbox.server_failures

    died, back, failures = asyncio.run(scenario())
    assert died == "error: the server of tool 'crash_noticed_late' stopped during the call; it is being restarted"
    assert back == "back"
    assert failures == {"python server.py": 1}


def test_a_stdio_server_gets_a_minimal_environment_plus_what_the_task_names(test_server, monkeypatch):
    """Not autorl's environment (its API keys): the MCP SDK's minimal set, the `pass_env` names, the `env` table."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-for-a-tool-server")
    monkeypatch.setenv("NOTES_TOKEN", "passed-on-by-name")
    monkeypatch.setenv("HOME", "/home/someone")
    server = test_server.mcp_servers[0].model_copy(update={"env": {"MODE": "test"}, "pass_env": ["NOTES_TOKEN"]})
    task = test_server.model_copy(update={"mcp_servers": [server]})

    async def scenario() -> dict:
        async with await Toolbox.open(task) as toolbox:
            return json.loads(await toolbox.call("environment", "{}"))

    seen = asyncio.run(scenario())
    assert "OPENAI_API_KEY" not in seen
    assert seen["NOTES_TOKEN"] == "passed-on-by-name" and seen["MODE"] == "test" and seen["HOME"] == "/home/someone"
    extra = set(seen) - {"NOTES_TOKEN", "MODE", "HOME", "PATH", "SHELL", "TERM", "USER", "LOGNAME"}
    assert all(name.startswith(("LC_", "PYTHON", "__")) for name in extra), extra  # what Python itself sets

    monkeypatch.delenv("NOTES_TOKEN")
    with pytest.raises(McpServerDied, match=r"pass_env names NOTES_TOKEN, not set in autorl's environment"):
        asyncio.run(Toolbox.open(task))


def test_a_server_that_does_not_start_is_one_line(tmp_path):
    (tmp_path / "server.py").write_text("import sys\nprint('no database here', file=sys.stderr)\nsys.exit(1)\n")
    task = TaskSpec(description="x", mcp_servers=[McpServerSpec(command=["python", "server.py"], cwd=tmp_path)])
    with pytest.raises(AutoRLError) as error:
        asyncio.run(Toolbox.open(task))
    assert str(error.value) == (
        "MCP server 'python server.py' did not start: Connection closed; its stderr ends: no database here"
    )
    missing = TaskSpec(description="x", mcp_servers=[McpServerSpec(command=["no-such-server-program"], cwd=tmp_path)])
    with pytest.raises(AutoRLError, match=r"did not start: .*cannot run 'no-such-server-program'"):
        asyncio.run(Toolbox.open(missing))


def test_a_streamable_http_server_by_url(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, str(NOTES / "notes_server.py"), "--http", str(port)],
        env={**os.environ, "NOTES_DB": ":memory:"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "the HTTP server did not start"
                time.sleep(0.1)
        task = TaskSpec(description="x", mcp_servers=[McpServerSpec(url=f"http://127.0.0.1:{port}/mcp")])

        async def scenario():
            async with await Toolbox.open(task) as toolbox:
                saved = await toolbox.call("add_note", '{"title": "wifi", "text": "password is hunter2"}')
                return saved, await toolbox.call("search_notes", '{"query": "wifi"}')

        saved, found = asyncio.run(scenario())
        assert saved == "saved note 1: wifi" and found.startswith("[1] wifi: password is hunter2")
    finally:
        server.kill()
        server.wait()


PARENT = """
import asyncio, sys
sys.path.insert(0, {repo!r})
from autorl.task import McpServerSpec, TaskSpec
from autorl.agents.tools import Toolbox

async def main():
    task = TaskSpec(description="x", tool_timeout_s=60, mcp_servers=[McpServerSpec(command=["python", "server.py"])])
    toolbox = await Toolbox.open(task)
    napping = asyncio.create_task(toolbox.call("nap", '{{"seconds": 60}}'))  # keeps the server from exiting at stdin EOF
    await asyncio.sleep(0.5)
    print("ready", flush=True)
    await napping

asyncio.run(main())
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_no_server_outlives_its_parent(tmp_path, sig):
    (tmp_path / "server.py").write_text(TEST_SERVER)
    (tmp_path / "parent.py").write_text(PARENT.format(repo=str(REPO)))
    parent = subprocess.Popen([sys.executable, "parent.py"], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert parent.stdout.readline().strip() == "ready"
        (server,) = children(parent.pid)
        parent.send_signal(sig)
        parent.wait(timeout=10)
        assert not wait_gone({server}, 6)
    finally:
        parent.kill()
        parent.wait()
