"""`kcoder mcp`: kcoder's evaluator, profiler, tuner, optimize runs and skills as MCP tools,
and run reports as resources, over stdio or streamable HTTP.

Built on the official Python SDK (`mcp`, its `MCPServer`): it is the protocol's reference
implementation, maintained with the specification, so new protocol versions and transports
arrive there first; it already carries what kcoder needs (progress notifications,
cancellation, resources, stdio and streamable HTTP) with fewer dependencies than the
third-party `fastmcp`, which adds a large framework on top of the same SDK.

The blocking work (an evaluation takes seconds to minutes) runs in worker threads so the
server keeps answering; one evaluation-type call (eval, profile, tune) runs at a time, because
two at once would time each other's load instead of the kernels. Across processes (an
`optimize` run, which is a child `kcoder optimize` of its own, or another kcoder) the device's
lock (devicelock.py) does the same: every step that runs on the device holds it. A problem an
MCP client names runs confined everywhere (the reference process, the profiler's target, the
optimize run's graph capture), as a candidate does.

No `from __future__ import annotations` here: the SDK reads the tools' annotations at runtime.
"""

import itertools
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, TypeVar

import anyio
import anyio.lowlevel
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from kcoder.choices import Stage, TuneStrategy
from kcoder.evaluate.options import CONFINE_PROBLEM_ENV
from kcoder.mcp import actions
from kcoder.mcp.actions import CandidateRef, ServerState, TuneRequest
from kcoder.mcp.confine import Confinement
from kcoder.mcp.jobs import optimize_argv, run_job
from kcoder.mcp.reports import RunIndex
from kcoder.problem import ProblemError
from kcoder.settings import Settings

T = TypeVar("T")

Problem = Annotated[str, Field(description="KernelBench problem file (Model, get_inputs, get_init_inputs); "
                                           "relative to the server's root")]
CandidatePath = Annotated[str | None, Field(description="candidate file defining ModelNew (give this or source)")]
CandidateSource = Annotated[str | None, Field(description="the candidate file's text, instead of a path; it "
                                                          "is written to a private temp file, never your tree")]
StopAfter = Annotated[Stage, Field(
    description="build, verify (correctness only, fast) or timing (also vs eager and torch.compile)")]
Budget = Annotated[float | None, Field(description="seconds of measured time per implementation (default 3)")]
NoCompile = Annotated[bool, Field(description="skip the torch.compile baseline (its speed-up is then unknown)")]

# Hints for clients that ask before each call: eval, profile and the skills change none of the
# user's files (only kcoder's build cache); tune and optimize add run folders, never overwrite.
READS = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
ADDS = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)

INSTRUCTIONS = """kcoder judges custom CUDA/C++ kernels that replace a PyTorch module (KernelBench format):
a problem file defines Model, get_inputs(), get_init_inputs(); a candidate defines ModelNew and builds its
kernels with torch.utils.cpp_extension.load_inline. `eval` is a trustworthy verdict (correctness on fresh
inputs, refused fallbacks and tricks, timing against eager and torch.compile); read the skills for the
kernel-writing workflows. A rejected candidate is a normal answer: its verdict says why."""


def build_server(settings: Settings, root: Path) -> MCPServer:
    """The server with every tool and resource, using `settings` for every evaluation."""
    state = ServerState(settings, Confinement(root), RunIndex(root))
    server = MCPServer("kcoder", instructions=INSTRUCTIONS, log_level="WARNING")
    where = (f" Paths are relative to {state.confine.root} and must lie inside it once resolved (symlinks and "
             "'..' included); a candidate may also lie in the problem's folder. Anything else is refused.")
    register_judging(server, state, where)
    register_runs(server, state, where)
    return server


def register_judging(server: MCPServer, state: ServerState, where: str) -> None:
    """eval, profile and tune: the judge, with the server's settings."""
    one_at_a_time = anyio.Lock()
    s = state.settings

    async def eval_tool(problem: Problem, ctx: Context, candidate: CandidatePath = None,
                        source: CandidateSource = None, stop_after: StopAfter = "timing", budget: Budget = None,
                        no_compile: NoCompile = False) -> dict[str, Any]:
        ref = CandidateRef(candidate, source)
        async with judge_turn(one_at_a_time, ctx):
            return await blocking(actions.evaluate_call, state, problem, ref, stop_after, budget, no_compile,
                                  progress(ctx))

    async def profile_tool(problem: Problem, ctx: Context, candidate: CandidatePath = None,
                           source: CandidateSource = None, full: bool = False) -> str:
        async with judge_turn(one_at_a_time, ctx):
            return await blocking(actions.profile_call, state, problem, CandidateRef(candidate, source), full)

    async def tune_tool(problem: Problem, ctx: Context, candidate: CandidatePath = None,
                        source: CandidateSource = None,
                        strategy: TuneStrategy = "auto",
                        trials: Annotated[int | None, Field(description="points judged at most")] = None,
                        time_s: Annotated[float | None, Field(description="seconds at most")] = None,
                        budget: Annotated[float, Field(description="measured seconds per point")] = 1.0,
                        no_compile: Annotated[bool, Field(description="no torch.compile baseline in the best "
                                                                      "point's final check")] = False) -> str:
        request = TuneRequest(strategy, trials, time_s, budget, no_compile)
        async with judge_turn(one_at_a_time, ctx):
            return await blocking(actions.tune_call, state, problem, CandidateRef(candidate, source), request,
                                  progress(ctx))

    server.add_tool(eval_tool, name="eval", annotations=READS, description=(
        f"Judge a candidate kernel against a problem with kcoder's evaluator (device {s.device}, precision "
        f"{s.precision}, sandbox {s.sandbox}): built, verified on at least 5 fresh input sets, torch fallbacks "
        "and timing tricks refused, timed against eager and torch.compile. Returns the verdict (status "
        "accepted/rejected/error, reason, speed-ups, reward) and a one-line summary; a failed candidate is a "
        "normal answer, not an error. Progress notifications name each stage." + where))
    server.add_tool(profile_tool, name="profile", annotations=READS, description=(
        "Profile a candidate's CUDA kernels (Nsight Compute: time, throughput, occupancy, stalls, roofline; "
        "ptxas registers/spills; a torch.profiler timeline without ncu). Returns compact text. Needs the cuda "
        "device; says nothing about correctness (use eval)." + where))
    server.add_tool(tune_tool, name="tune", annotations=ADDS, description=(
        "Autotune a candidate that declares module-level TUNE (name -> list of values) and CONFIG (the current "
        "choice): every point built, verified and timed by the judge. Returns the table fastest first and the "
        "best CONFIG; the tuned file, table.md/json and a plot go to .kcoder/runs/tune-* beside the problem. "
        "The candidate file is never modified." + where))


def register_runs(server: MCPServer, state: ServerState, where: str) -> None:
    """optimize, skills, skill and the run-report resources."""

    async def optimize_tool(problem: Problem, ctx: Context, max_turns: int | None = None,
                            max_time: float | None = None) -> str:
        return await optimize(state, problem, ctx, max_turns, max_time)

    def skills_tool() -> dict[str, list[dict[str, str]]]:
        return {"skills": actions.skill_list(state)}

    def skill_tool(name: Annotated[str, Field(description="a skill name from the skills tool")]) -> str:
        try:
            return actions.skill_text(state, name)
        except ValueError as exc:
            raise ToolError(str(exc)) from None

    server.add_tool(optimize_tool, name="optimize", annotations=ADDS, description=(
        "Run `kcoder optimize` with the built-in (no-LLM) policy on a problem: a long job (minutes to hours) "
        "that writes candidates into .kcoder/runs/<problem>-<stamp>/ beside the problem (your file is never "
        "modified). Each output line arrives as a progress notification; cancelling the request stops the run, "
        "which still writes its report. Returns the output's tail and the run's report.md." + where))
    server.add_tool(skills_tool, name="skills", annotations=READS, description=(
        "List kcoder's SKILL.md workflows for writing and optimizing kernels (name and description)."))
    server.add_tool(skill_tool, name="skill", annotations=READS,
                    description="Read one kcoder skill (its SKILL.md body) by name.")

    @server.resource("kcoder://runs", name="runs", mime_type="application/json",
                     description="Run directories under the server's root that have a report, with their URIs.")
    def runs_index() -> str:
        return state.runs.listing()

    @server.resource("kcoder://runs/{run}/{file}", name="run-report", mime_type="text/plain",
                     description="A run's report.md/report.json (optimize) or table.md/table.json (tune).")
    def run_report(run: str, file: str) -> str:
        try:
            return state.runs.read(run, file)
        except LookupError as exc:
            raise ResourceNotFoundError(str(exc)) from None


@asynccontextmanager
async def judge_turn(lock: anyio.Lock, ctx: Context) -> AsyncIterator[None]:
    """Hold the server's one evaluation slot; say so when the call has to wait for it."""
    if lock.locked():
        await ctx.report_progress(0, None, "waiting: another eval, profile or tune call is running")
    async with lock:
        yield


async def blocking(func: Callable[..., T], *args: Any) -> T:
    """`func(*args)` in a worker thread; bad input becomes a tool error naming the file and problem.
    (The thread lives until the call returns: the evaluator's children, which die with the thread
    that started them, see their evaluation through.)"""
    try:
        return await anyio.to_thread.run_sync(func, *args)
    except (ProblemError, ValueError) as exc:
        raise ToolError(str(exc)) from None


def progress(ctx: Context) -> Callable[[str], None]:
    """A callback for worker threads that sends each message as a progress notification."""
    token = anyio.lowlevel.current_token()
    counter = itertools.count(1)

    def notify(message: str) -> None:
        try:
            anyio.from_thread.run(ctx.report_progress, next(counter), None, message, token=token)
        except Exception:  # noqa: BLE001  progress is information only: it must never fail the work
            pass

    return notify


async def optimize(state: ServerState, problem: str, ctx: Context, max_turns: int | None,
                   max_time: float | None) -> str:
    """The optimize tool: a `kcoder optimize` child, its lines as progress; exit 2 is a tool error."""
    try:
        problem_path = state.confine.problem(problem)
        settings = replace(state.settings, max_time=max_time,
                           max_turns=state.settings.max_turns if max_turns is None else max_turns)
        settings.validate()
    except ValueError as exc:
        raise ToolError(str(exc)) from None
    state.runs.remember(problem_path)

    async def on_line(number: int, line: str) -> None:
        await ctx.report_progress(number, None, line)

    # the client named the problem: the run's reference processes and its graph capture confine it
    env = {**os.environ, CONFINE_PROBLEM_ENV: "1"}
    result = await run_job(optimize_argv(problem_path, settings), state.confine.root, on_line, env=env)
    if result.rc == 2:  # bad input or usage, as the CLI's exit code says
        raise ToolError(result.text.strip() or f"kcoder optimize {problem_path}: bad input (exit 2)")
    text = f"kcoder optimize exited {result.rc}\n{result.text}"
    report = result.run_dir / "report.md" if result.run_dir else None
    if report is not None and report.is_file():
        text += f"\n\n{report.read_text(encoding='utf-8', errors='replace')}"
    return text


def serve(settings: Settings, root: Path, http_port: int | None = None, host: str = "127.0.0.1") -> None:
    """Run the server until the client goes away (stdio) or kcoder is stopped (HTTP)."""
    server = build_server(settings, root)
    if http_port is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=http_port)
