"""`kcoder mcp`: a real `kcoder mcp` subprocess driven by the official SDK's clients (stdio and
streamable HTTP), the path confinement, and the optimize job runner (progress, cancellation).

Every client call sits under anyio.fail_after, so a hang fails the test instead of blocking CI.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from helpers import ROOT

EXAMPLE = ROOT / "examples" / "elementwise_chain"
CALL_S = 240  # one tool call: an evaluation (a cold C++ build takes about a minute here)
START_S = 60

# A fallback: ModelNew.forward computes with torch ops; the run-time guard refuses it (no build).
CHEAT = """import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return F.gelu(x * self.weight + self.bias) * torch.sigmoid(x)
"""


# --- confinement (no server) ----------------------------------------------------------------

def test_confinement_refuses_dotdot_absolute_and_symlink_escapes(tmp_path):
    from kcoder.mcp.confine import Confinement, ConfinementError

    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (root / "sub" / "model.py").write_text("x = 1\n")
    (outside / "secret.py").write_text("x = 2\n")
    (root / "link.py").symlink_to(outside / "secret.py")
    (root / "linkdir").symlink_to(outside)
    confine = Confinement(root)

    assert confine.problem("sub/model.py") == (root / "sub" / "model.py").resolve()
    assert confine.problem(str(root / "sub" / "model.py")) == (root / "sub" / "model.py").resolve()
    assert confine.resolve("sub/../sub/model.py", "problem") == (root / "sub" / "model.py").resolve()
    for bad in ["../outside/secret.py", str(outside / "secret.py"), "link.py", "linkdir/secret.py",
                "sub/../../outside/secret.py", "/etc/passwd"]:
        with pytest.raises(ConfinementError, match="outside the allowed folders") as info:
            confine.problem(bad)
        assert bad in str(info.value)
    with pytest.raises(ConfinementError, match="no such file"):
        confine.problem("sub/missing.py")


def test_confinement_lets_a_candidate_lie_in_the_problem_folder(tmp_path):
    from kcoder.mcp.confine import Confinement, ConfinementError

    problem_dir, root = tmp_path / "problems", tmp_path / "root"
    problem_dir.mkdir()
    root.mkdir()
    (problem_dir / "model.py").write_text("x = 1\n")
    (problem_dir / "model_new.py").write_text("x = 2\n")
    confine = Confinement(root)
    problem = (problem_dir / "model.py").resolve()
    assert confine.beside(problem, str(problem_dir / "model_new.py"), "candidate") == problem.parent / "model_new.py"
    with pytest.raises(ConfinementError, match="candidate"):
        confine.beside(problem, str(tmp_path), "candidate")  # the folder above both is not allowed


# --- the optimize job runner ----------------------------------------------------------------

CHILD = """
import os, signal, sys, time
def stop(signum, frame):
    open(sys.argv[1], "w").write("terminated")
    print("report written", flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
open(sys.argv[2], "w").write(str(os.getpid()))
for i in range(1000):
    print(f"line {i}", flush=True)
    time.sleep(0.2)
"""


def test_job_runner_forwards_lines_and_stops_the_child_with_sigterm_on_cancel(tmp_path):
    from kcoder.mcp.jobs import run_job

    marker, pid_file, lines = tmp_path / "terminated", tmp_path / "pid", []

    async def main() -> None:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                async def on_line(number: int, line: str) -> None:
                    lines.append((number, line))
                    if number == 3:
                        tg.cancel_scope.cancel()  # the client cancelled the request

                tg.start_soon(run_job, [sys.executable, "-c", CHILD, str(marker), str(pid_file)], tmp_path, on_line)

    anyio.run(main)
    assert lines[:3] == [(1, "line 0"), (2, "line 1"), (3, "line 2")]
    assert marker.read_text() == "terminated"  # SIGTERM, handled like Ctrl-C
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


def test_job_runner_returns_exit_status_and_output_tail(tmp_path):
    from kcoder.mcp.jobs import run_job

    async def main():
        async def on_line(number: int, line: str) -> None:
            pass

        with anyio.fail_after(30):
            return await run_job([sys.executable, "-c", "print('kcoder run directory: /x/a b  ·  model m');"
                                  "print('bad', end=''); raise SystemExit(2)"], tmp_path, on_line)

    result = anyio.run(main)
    assert result.rc == 2 and result.lines == ["kcoder run directory: /x/a b  ·  model m", "bad"]
    assert result.run_dir == Path("/x/a b") and not result.cancelled


def test_cancelling_the_optimize_request_stops_the_run_with_sigterm(tmp_path, monkeypatch):
    """Through the SDK (in-memory client, real dispatch): the optimize tool's lines arrive as
    progress, and abandoning the request makes the server SIGTERM the run. The child here
    stands in for `kcoder optimize` (which takes minutes); test_stdio_optimize_* runs the real one."""
    from mcp.client.client import Client

    from kcoder.mcp import server as mcp_server
    from kcoder.settings import Settings

    shutil.copy(EXAMPLE / "model.py", tmp_path / "model.py")
    marker, pid_file, messages = tmp_path / "terminated", tmp_path / "pid", []
    monkeypatch.setattr(mcp_server, "optimize_argv", lambda problem, settings: [
        sys.executable, "-c", CHILD, str(marker), str(pid_file)])
    server = mcp_server.build_server(Settings(device="cpu"), tmp_path)

    async def main() -> None:
        async with Client(server) as client:
            with anyio.fail_after(30), anyio.CancelScope() as request:
                async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                    messages.append(message)
                    if len(messages) == 3:
                        request.cancel()  # the caller gives up on the request

                await client.call_tool("optimize", {"problem": "model.py"}, progress_callback=on_progress)
            with anyio.fail_after(30):
                while not marker.exists():
                    await anyio.sleep(0.1)

    anyio.run(main)
    assert messages[:3] == ["line 0", "line 1", "line 2"]
    assert marker.read_text() == "terminated"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the server reaps it right after the handler exits
        try:
            os.kill(int(pid_file.read_text()), 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the optimize child outlived the cancelled request")


# --- the server over stdio and streamable HTTP ----------------------------------------------

@pytest.fixture
def workdir(tmp_path):
    """The server's start directory: a copy of the example and a finished run's report."""
    work = tmp_path / "work"
    work.mkdir()
    for name in ("model.py", "solution_cpu.py"):
        shutil.copy(EXAMPLE / name, work / name)
    (work / "bad_problem.py").write_text("import torch\n\nX = 1\n")
    run = work / ".kcoder" / "runs" / "model-20261205-000000"
    run.mkdir(parents=True)
    (run / "report.md").write_text("# kcoder run: model.py\noutcome: target reached\n")
    (tmp_path / "outside.py").write_text((EXAMPLE / "model.py").read_text())
    return work


def server_env() -> dict[str, str]:
    # The SDK's stdio client passes only an allow-list by default: give the server PATH,
    # KCODER_CACHE (the tests' shared build cache) and the rest explicitly.
    return dict(os.environ)


def text_of(result) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


async def exercise(session, work: Path) -> None:
    """What both transports must do: list, judge a correct and a cheating candidate, read a
    skill and a run report, refuse a path outside the allowed folders."""
    with anyio.fail_after(START_S):
        await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
    assert {"eval", "profile", "tune", "optimize", "skills", "skill"} <= set(tools)
    assert str(work.resolve()) in tools["eval"].description  # the description says which paths
    assert tools["skill"].annotations.read_only_hint and not tools["optimize"].annotations.read_only_hint

    with anyio.fail_after(CALL_S):
        good = await session.call_tool("eval", {"problem": "model.py", "candidate": "solution_cpu.py",
                                                "stop_after": "verify"})
    assert not good.is_error, text_of(good)
    verdict = good.structured_content["verdict"]
    assert verdict["correct"] and verdict["status"] == "accepted" and verdict["n_input_sets"] >= 5
    assert good.structured_content["summary"].startswith("✓ solution_cpu.py: correct on")

    with anyio.fail_after(CALL_S):
        cheat = await session.call_tool("eval", {"problem": "model.py", "source": CHEAT, "stop_after": "verify"})
    assert not cheat.is_error, text_of(cheat)  # a failed candidate is an answer, not a tool error
    verdict = cheat.structured_content["verdict"]
    assert verdict["status"] == "rejected" and verdict["reward"] == -1
    assert "fallback refused" in verdict["reason"] and "ModelNew.forward" in verdict["reason"]
    assert sorted(p.name for p in work.iterdir()) == [".kcoder", "bad_problem.py", "model.py", "solution_cpu.py"]

    with anyio.fail_after(30):
        skills = (await session.call_tool("skills", {})).structured_content["skills"]
        name = skills[0]["name"]
        skill = await session.call_tool("skill", {"name": name})
        unknown = await session.call_tool("skill", {"name": "no-such-skill"})
        untunable = await session.call_tool("tune", {"problem": "model.py", "source": CHEAT})
        profile = await session.call_tool("profile", {"problem": "model.py", "candidate": "solution_cpu.py"})
        outside = await session.call_tool("eval", {"problem": "../outside.py", "candidate": "solution_cpu.py"})
        missing = await session.call_tool("eval", {"problem": "model.py", "candidate": "nope.py"})
        bad = await session.call_tool("eval", {"problem": "bad_problem.py", "candidate": "solution_cpu.py"})
        index = await session.read_resource("kcoder://runs")
        report = await session.read_resource("kcoder://runs/model-20261205-000000/report.md")
    assert not skill.is_error and f"# skill {name}" in text_of(skill) and len(text_of(skill)) > 200
    assert unknown.is_error and "no skill named 'no-such-skill'" in text_of(unknown)
    assert untunable.is_error and "declares no TUNE space" in text_of(untunable)
    assert profile.is_error and "needs the cuda target" in text_of(profile) and "--device cpu" in text_of(profile)
    assert outside.is_error and "../outside.py" in text_of(outside)
    assert "outside the allowed folders" in text_of(outside)
    assert missing.is_error and "nope.py: no such file" in text_of(missing)
    assert bad.is_error and "bad_problem.py" in text_of(bad) and "Model" in text_of(bad)
    assert json.loads(index.contents[0].text)[0]["run"] == "model-20261205-000000"
    assert "outcome: target reached" in report.contents[0].text


def test_stdio_server(workdir):
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "kcoder", "mcp", "--device", "cpu"],
                                   env=server_env(), cwd=str(workdir))

    async def main() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await exercise(session, workdir)

    anyio.run(main)


def test_stdio_optimize_sends_progress_and_reports_bad_input_as_tool_error(workdir):
    """The optimize tool runs `kcoder optimize` as a child: its lines arrive as progress
    notifications, and its exit 2 (bad input or usage) is a tool error carrying its message."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "kcoder", "mcp", "--device", "cpu"],
                                   env=server_env(), cwd=str(workdir))
    messages: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    async def main():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            with anyio.fail_after(120):
                await session.initialize()
                return await session.call_tool("optimize", {"problem": "bad_problem.py", "max_turns": 1},
                                               progress_callback=on_progress)

    result = anyio.run(main)
    assert result.is_error
    assert messages and messages[0] in text_of(result)  # the child's lines, as progress
    assert "kcoder optimize" in text_of(result) or "bad_problem.py" in text_of(result)


@pytest.mark.slow
def test_stdio_tune_writes_its_outputs_beside_the_problem(workdir):
    """One point of the example's space (its current CONFIG), then the plain-build check: the
    table and best CONFIG come back, the outputs land in a tune run folder, the candidate is
    unchanged, and the table is readable as a resource."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "kcoder", "mcp", "--device", "cpu"],
                                   env=server_env(), cwd=str(workdir))
    before = (workdir / "solution_cpu.py").read_text()
    messages: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    async def main():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            with anyio.fail_after(START_S):
                await session.initialize()
            with anyio.fail_after(2 * CALL_S):
                result = await session.call_tool("tune", {
                    "problem": "model.py", "candidate": "solution_cpu.py", "strategy": "exhaustive", "trials": 1,
                    "budget": 0.3, "no_compile": True}, progress_callback=on_progress)
            runs = [entry["run"] for entry in json.loads((await session.read_resource("kcoder://runs")).contents[0].text)]
            tune_run = next(r for r in runs if r.startswith("tune-solution_cpu-"))
            table = await session.read_resource(f"kcoder://runs/{tune_run}/table.md")
            return result, tune_run, table.contents[0].text

    result, tune_run, table = anyio.run(main)
    text = text_of(result)
    assert not result.is_error, text
    assert "best CONFIG = {'CHUNK': 0, 'DYNAMIC': 0}" in text and "| CHUNK=0 DYNAMIC=0 | ok" in text
    assert "built as plain load_inline builds it: verified" in text
    assert any(m.startswith("point 1: CHUNK=0 DYNAMIC=0:") for m in messages), messages
    folder = workdir / ".kcoder" / "runs" / tune_run
    assert (folder / "solution_cpu_tuned.py").is_file() and "CHUNK=0 DYNAMIC=0" in table
    assert (workdir / "solution_cpu.py").read_text() == before


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@asynccontextmanager
async def http_server(work: Path):
    """`kcoder mcp --http PORT` started in `work`; yields its URL once it accepts connections."""
    port = free_port()
    log = (work.parent / "server.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "kcoder", "mcp", "--http", str(port), "--device", "cpu"],
                            cwd=work, env=server_env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_S
        while True:
            assert proc.poll() is None, (work.parent / "server.log").read_text()
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, "kcoder mcp --http did not start listening"
                await anyio.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_streamable_http_server(workdir):
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def main() -> None:
        async with http_server(workdir) as url:
            async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
                await exercise(session, workdir)

    anyio.run(main)


def test_bad_options_exit_2_naming_the_problem(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "kcoder", "mcp", "--root", str(tmp_path / "nope")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--root" in proc.stderr and "not a folder" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "kcoder", "mcp", "--allow", "fft"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2 and "fft" in proc.stderr


def test_help_imports_neither_the_sdk_nor_torch():
    for args in (["--help"], ["mcp", "--help"]):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "kcoder", *args],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and "mcp" in proc.stdout
        imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines()}
        assert not {"mcp", "torch", "anyio", "uvicorn"} & imported, args
