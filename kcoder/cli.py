"""The `kcoder` command line. Heavy modules (torch, litellm) load inside the commands only,
so `kcoder --help` stays instant.

Exit codes: 0 success, 1 the candidate failed (compile error, wrong, crash, timeout),
2 bad input or usage.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import typer

from kcoder.settings import (
    DEFAULT_BUDGET_S,
    DEFAULT_TARGET,
    Device,
    Precision,
    SandboxMode,
    Settings,
    Stage,
    ToolCallMode,
    default_device,
    parse_allow,
)

F = TypeVar("F", bound=Callable[..., Any])
app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="kcoder: faster PyTorch modules with custom kernels, honestly verified.")


@app.callback()
def _root() -> None:
    """kcoder: faster PyTorch modules with custom kernels, honestly verified."""


def _bad_input(message: str, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"error": message}))
    else:
        from rich.markup import escape

        from kcoder.ui import console

        # soft_wrap: one line per error however narrow the terminal (or none, when piped)
        console(stderr=True).print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(2)


def _settings(device: Device | None, allow: str | None, **fields: Any) -> Settings:
    """One command's Settings; the device defaults to cuda when a GPU is present."""
    return Settings(device=device or default_device(), allow=parse_allow(allow), **fields)


# Options that several commands share: one declaration each.
ProblemArg = Annotated[Path, typer.Argument(help="KernelBench-style problem file (Model, get_inputs, "
                                            "get_init_inputs); it is never modified.")]
CandidateArg = Annotated[Path, typer.Argument(help="Candidate file defining ModelNew (kernels via load_inline).")]
DeviceOpt = Annotated[Device | None, typer.Option(help="cuda or cpu (default: cuda when a GPU is present).")]
AllowOpt = Annotated[str | None, typer.Option(help="Library ops the candidate may call: gemm,conv (cuBLAS/cuDNN).")]
PrecisionOpt = Annotated[Precision, typer.Option(help="strict (fp32 is fp32) or relaxed (TF32/bf16; baselines too).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print exactly one JSON object.")]
SandboxOpt = Annotated[SandboxMode, typer.Option(
    help="Confine the candidate's process: auto (bubblewrap where it works), bwrap, or none.")]


def _option(name: str, annotation: Any, default: Any = None) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)


def with_options(*options: inspect.Parameter) -> Callable[[F], F]:
    """Give a command the declared `options` as well: typer reads a command's options from its
    signature, and the function receives these in its **options (named like Settings fields)."""

    def decorate(func: F) -> F:
        own = [p for p in inspect.signature(func, eval_str=True).parameters.values()
               if p.kind is not inspect.Parameter.VAR_KEYWORD]
        func.__signature__ = inspect.Signature([*own, *options])  # type: ignore[attr-defined]
        return func

    return decorate


# The agent commands' options (optimize, chat), each declared once.
MODEL = _option("model", Annotated[str | None, typer.Option(
    envvar="KCODER_MODEL", help="litellm model, e.g. anthropic/..., openai/..., hosted_vllm/NAME.")])
API_BASE = _option("api_base", Annotated[str | None, typer.Option(
    help="OpenAI-compatible server URL (vLLM, SGLang ...).")])
DEVICE = _option("device", DeviceOpt)
KEEP_GOING = _option("keep_going", Annotated[bool, typer.Option(
    "--keep-going", help="Continue after reaching the target, and when the speed of light puts it "
    "out of reach.")], False)
NO_PREFLIGHT = _option("preflight", Annotated[bool, typer.Option(
    "--preflight/--no-preflight", help="Measure the baselines and the speed of light before the first turn "
    "(stop when the target is out of reach).")], True)
MAX_COST = _option("max_cost", Annotated[float | None, typer.Option(help="Cost limit in USD.")])
MAX_TIME = _option("max_time", Annotated[float | None, typer.Option(help="Time limit in seconds.")])
RESUME = _option("resume", Annotated[Path | None, typer.Option(help="Continue the run in this run directory.")])
ALLOW = _option("allow", AllowOpt)
PRECISION = _option("precision", PrecisionOpt, "strict")
RUNS_DIR = _option("runs_dir", Annotated[Path | None, typer.Option(
    help="Where run directories go (.kcoder/runs beside the problem).")])
PROFILE = _option("profile", Annotated[str | None, typer.Option(
    help="Model profile from kcoder/agent/profiles.json, e.g. cuda-agent.")])
TOOL_CALL = _option("tool_call", Annotated[ToolCallMode | None, typer.Option(
    help="native, text or auto tool calling.")])
SANDBOX = _option("sandbox", SandboxOpt, "auto")
VERBOSE = _option("verbose", Annotated[bool, typer.Option(
    "--verbose", help="Show whole files and diffs after each tool call (default: one line per call).")], False)
COMMIT = _option("commit", Annotated[bool, typer.Option(
    "--commit", help="Commit the best verified kernel to branch kcoder/<problem>.")], False)


@app.command("eval")
def eval_command(
    problem: ProblemArg,
    candidate: CandidateArg,
    device: DeviceOpt = None,
    allow: AllowOpt = None,
    precision: PrecisionOpt = "strict",
    stop_after: Stage = typer.Option("timing", help="build, verify or timing."),
    no_compile: bool = typer.Option(False, "--no-compile", help="Skip the torch.compile baseline."),
    budget: float = typer.Option(DEFAULT_BUDGET_S, help="Seconds of measured time per implementation "
                                 "(at least 10 rounds)."),
    plain_build: bool = typer.Option(False, "--plain-build",
                                     help="Build exactly as plain load_inline does (no precompiled header)."),
    sandbox: SandboxOpt = "auto",
    as_json: JsonOpt = False,
) -> None:
    """Build, verify and time CANDIDATE against PROBLEM; print the verdict."""
    from kcoder.evaluate import evaluate
    from kcoder.problem import ProblemError

    settings = _settings(device, allow, precision=precision, stop_after=stop_after, no_compile=no_compile,
                         budget=budget, plain_build=plain_build, sandbox=sandbox)
    try:
        settings.validate()
        verdict = _evaluate_with_status(evaluate, problem, candidate, settings.eval_options(), quiet=as_json)
    except (ProblemError, ValueError) as exc:
        _bad_input(str(exc), as_json)
        return
    if as_json:
        print(verdict.to_json())
    else:
        from kcoder.ui import console, verdict_table

        out = console()
        out.print(verdict_table(verdict))
        if verdict.log and not verdict.correct:
            out.print(verdict.log, markup=False)
    if verdict.status == "error":  # kcoder's own failure, not the candidate's
        raise typer.Exit(3)
    raise typer.Exit(0 if verdict.correct else 1)


def _evaluate_with_status(evaluate: Callable[..., Any], problem: Path, candidate: Path, options: Any,
                          quiet: bool) -> Any:
    """The evaluation under a live status on stderr when that is a terminal (not with --json)."""
    if quiet or not sys.stderr.isatty():
        return evaluate(problem, candidate, options)
    from dataclasses import replace

    from kcoder.ui import console, live_status

    with live_status(console(stderr=True), f"evaluating {candidate.name}", announce=False) as update:
        return evaluate(problem, candidate, replace(options, on_stage=update))


TuneStrategy = Literal["auto", "exhaustive", "tpe", "evolution"]


@app.command("tune")
@with_options(
    _option("strategy", Annotated[TuneStrategy, typer.Option(
        help="exhaustive, tpe (model-based), evolution (genetic), or auto (exhaustive when the space "
             "fits the budget).")], "auto"),
    _option("trials", Annotated[int | None, typer.Option(help="Budget: points judged (default: all).")]),
    _option("time_s", Annotated[float | None, typer.Option("--time", help="Budget: seconds.")]),
    _option("out", Annotated[Path | None, typer.Option(
        help="Also write the tuned file here (your candidate is replaced only if this names it).")]),
    _option("out_dir", Annotated[Path | None, typer.Option(
        help="Output folder (default: .kcoder/runs/tune-<candidate>-<stamp> beside the problem).")]),
    DEVICE, ALLOW, PRECISION,
    _option("budget", Annotated[float, typer.Option(
        help="Seconds of measured time per point and implementation.")], 1.0),
    _option("jobs", Annotated[int | None, typer.Option(
        help="Points built ahead in parallel (default: a quarter of the host's cores).")]),
    _option("no_cache", Annotated[bool, typer.Option(
        "--no-cache", help="Judge every point again, ignoring stored results.")], False),
    _option("no_compile", Annotated[bool, typer.Option(
        "--no-compile", help="No torch.compile baseline in the best file's final check.")], False),
    _option("seed", Annotated[int, typer.Option(help="Seed of the tpe and evolution samplers.")], 0),
    _option("profile_top", Annotated[int, typer.Option(
        help="cuda: Nsight Compute metrics for this many of the fastest points (0: none).")], 3),
    SANDBOX, _option("as_json", JsonOpt, False))
def tune_command(problem: ProblemArg, candidate: CandidateArg, **options: Any) -> None:
    """Search CANDIDATE's declared TUNE space against PROBLEM: every point built, verified and
    timed by the judge; writes the tuned file, table.md/json and tune.png."""
    from kcoder.problem import ProblemError
    from kcoder.tune.command import tune_from_cli

    try:
        code = tune_from_cli(problem, candidate, options)
    except (ProblemError, ValueError) as exc:
        _bad_input(str(exc), options["as_json"])
        return
    raise typer.Exit(code)


@app.command("optimize")
@with_options(MODEL, API_BASE, DEVICE, _option("target", Annotated[float, typer.Option(
    help="Stop at a verified candidate this many times faster than torch.compile.")], DEFAULT_TARGET),
    KEEP_GOING, _option("max_turns", Annotated[int, typer.Option(help="Turn limit.")], 200),
    MAX_COST, MAX_TIME, RESUME, ALLOW, PRECISION, RUNS_DIR, PROFILE, TOOL_CALL, SANDBOX, COMMIT, VERBOSE,
    NO_PREFLIGHT,
    _option("start", Annotated[str | None, typer.Option(
        help="builtin: with --model, start the model from the built-in policy's verified, tuned kernel.")]),
    _option("tune_trials", Annotated[int | None, typer.Option(
        help="Points the built-in policy's tuning judges (default 6).")]))
def optimize_command(problem: ProblemArg, **options: Any) -> None:
    """Write, verify, tune and time kernels for PROBLEM until one beats torch.compile: with
    --model an LLM agent, without one kcoder's built-in policy (templates + autotuning)."""
    from kcoder.agent.optimize import optimize
    from kcoder.ui import Output

    raise typer.Exit(optimize(problem, _settings(**options), Output()))


SUITE_OPTIONS = (
    _option("mode", Annotated[Literal["eval", "optimize"], typer.Option(
        help="eval: judge existing solutions (--solutions); optimize: kcoder optimize per problem.")], "eval"),
    _option("solutions", Annotated[Path | None, typer.Option(help="eval: folder of solutions matched by name "
            "(NAME.py, NAME_solution*.py, NAME/solution_<device>.py, NAME/model_new.py).")]),
    _option("level", Annotated[int | None, typer.Option(help="PROBLEMS are KernelBench checkouts: level{N}/*.py.")]),
    _option("out", Annotated[Path | None, typer.Option(help="The suite's folder (.kcoder/suites/suite-<stamp>).")]),
    _option("resume_dir", Annotated[Path | None, typer.Option(
        "--resume", help="Resume the suite in this folder: only problems without a result run.")]),
    _option("backend", Annotated[Literal["auto", "ray", "pool"], typer.Option(
        help="ray (local runtime or --ray-address), pool (local processes); auto: ray when installed.")], "auto"),
    _option("ray_address", Annotated[str | None, typer.Option(help="An existing Ray cluster's address.")]),
    _option("workers", Annotated[int | None, typer.Option(
        help="Concurrent evaluations (default: one per GPU; cpu: one per 8 cores).")]),
    MODEL, API_BASE, DEVICE, ALLOW, PRECISION, SANDBOX,
    _option("stop_after", Annotated[Stage, typer.Option(help="build, verify or timing.")], "timing"),
    _option("no_compile", Annotated[bool, typer.Option("--no-compile", help="No torch.compile baseline.")], False),
    _option("budget", Annotated[float, typer.Option(help="Measured seconds per implementation.")], DEFAULT_BUDGET_S),
    _option("target", Annotated[float, typer.Option(help="optimize: target over torch.compile.")], DEFAULT_TARGET),
    _option("max_turns", Annotated[int, typer.Option(help="optimize: turn limit per problem.")], 200),
    MAX_COST, MAX_TIME, KEEP_GOING, NO_PREFLIGHT, _option("as_json", JsonOpt, False))


@app.command("suite")
@with_options(*SUITE_OPTIONS)
def suite_command(problems: Annotated[list[str] | None, typer.Argument(
        help="Problem files, folders or globs (with --level: KernelBench checkouts).")] = None,
        **options: Any) -> None:
    """Run eval or optimize over many problems; writes summary.md/json, results.csv, plots."""
    from kcoder.suite.cli import suite_from_cli

    try:
        code, summary = suite_from_cli(problems or [], options, _settings)
    except ValueError as exc:
        _bad_input(str(exc), options["as_json"])
        return
    if options["as_json"]:
        print(json.dumps(summary, default=str))
    raise typer.Exit(code)


@app.command("skills")
def skills_command(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the SKILL.md workflows kcoder finds, flagging invalid ones."""
    from kcoder.agent.skills import list_skills

    skills = list_skills()
    if as_json:
        print(json.dumps([{"name": s.name, "description": s.description, "source": s.source,
                           "path": str(s.path), "valid": s.valid, "problems": s.problems,
                           "warnings": s.warnings} for s in skills], indent=2))
    else:
        from rich.table import Table

        from kcoder.ui import clip, console

        table = Table("name", "source", "status", "description")
        for s in skills:
            status = "[green]ok[/]" if s.valid else "[red]invalid: " + "; ".join(s.problems) + "[/]"
            table.add_row(s.name, s.source, status, clip(s.description, 90))
        console().print(table)
    raise typer.Exit(0 if all(s.valid for s in skills) else 1)


@app.command("log")
def log_command(path: Path = typer.Argument(Path("."), help="A path inside the git repository."),
                as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List accepted kernels committed on kcoder/* branches, with their speed-ups."""
    from kcoder.gitops import GitOpsError, list_accepted

    try:
        kernels = list_accepted(path)
    except GitOpsError as exc:
        _bad_input(str(exc), as_json)
        return
    if as_json:
        print(json.dumps([{"branch": k.branch, "commit": k.commit, "date": str(k.date),
                           "subject": k.subject, "reward": k.reward,
                           "speedup_vs_eager": k.speedup_vs_eager,
                           "speedup_vs_compile": k.speedup_vs_compile} for k in kernels], indent=2))
        return
    from rich.table import Table

    from kcoder.ui import console

    table = Table("branch", "commit", "date", "vs eager", "vs compile", "reward", "device")
    for k in kernels:
        table.add_row(k.branch, k.commit[:10], str(k.date)[:19],
                      f"{k.speedup_vs_eager:.2f}x" if k.speedup_vs_eager else "-",
                      f"{k.speedup_vs_compile:.2f}x" if k.speedup_vs_compile else "-", str(k.reward), k.device)
    console().print(table)


@app.command("profile")
def profile_command(
    problem: ProblemArg,
    candidate: CandidateArg,
    full: bool = typer.Option(False, "--full", help="More ncu sections; every stall and rule; raw metrics in --json."),
    summary: bool = typer.Option(False, "--summary", help="Print the compact text the agent's profile tool returns."),
    precision: PrecisionOpt = "strict",
    ncu: str | None = typer.Option(None, help="The ncu binary (default: $KCODER_NCU, PATH, $CUDA_HOME/bin)."),
    ncu_timeout: float = typer.Option(300.0, help="Seconds before ncu and the profiled process are killed."),
    save_ncu: str | None = typer.Option(None, help="Keep ncu's output as PREFIX.ncu-rep, PREFIX_raw.csv, "
                                        "PREFIX_details.csv."),
    as_json: JsonOpt = False,
    # Kernel profiling is cuda only, so the option is not offered; it stays accepted so that
    # `--device cpu` gets an error that says what to do instead.
    device: str = typer.Option("cuda", hidden=True),
) -> None:
    """Profile CANDIDATE's kernels: Nsight Compute metrics per kernel, roofline against the
    measured device, ptxas resources; a torch.profiler timeline when ncu cannot run."""
    from kcoder.problem import ProblemError
    from kcoder.profile.options import ProfileOptions
    from kcoder.profile.profiler import profile_candidate

    options = ProfileOptions(device=device, full=full, precision=precision, ncu=ncu, ncu_timeout_s=ncu_timeout,
                             save_prefix=save_ncu)
    try:
        report = profile_candidate(problem, candidate, options)
    except (ProblemError, ValueError) as exc:
        _bad_input(str(exc), as_json)
        return
    from kcoder.profile.render import render, summary_text

    if as_json:
        print(json.dumps(report.to_dict(full=full), default=str))
    elif summary:
        print(summary_text(report, full=full))
    else:
        from kcoder.ui import console

        render(report, console(), full=full)
    raise typer.Exit(report.exit_code)


@app.command("chat")
@with_options(MODEL, API_BASE, DEVICE, _option("target", Annotated[float, typer.Option(
    help="Speed-up over torch.compile that counts as reaching the target.")], DEFAULT_TARGET),
    _option("max_turns", Annotated[int, typer.Option(
        help="Model turns per message before the model must hand back.")], 30),
    MAX_COST, RESUME, ALLOW, PRECISION, RUNS_DIR, PROFILE, TOOL_CALL, SANDBOX, VERBOSE)
def chat_command(problem: ProblemArg, **options: Any) -> None:
    """Refine kernels for PROBLEM in conversation; /help lists the slash commands (/eval, /commit ...)."""
    from kcoder.chat.repl import run_chat

    options["max_turns"] = max(1, options["max_turns"])
    raise typer.Exit(run_chat(problem, _settings(**options)))


@app.command("mcp")
def mcp_command(
    http: int | None = typer.Option(None, "--http", metavar="PORT",
                                    help="Serve streamable HTTP on this port (at /mcp) instead of stdio."),
    host: str = typer.Option("127.0.0.1", help="Address to bind with --http (anything but loopback exposes "
                             "your files to the network: there is no authentication)."),
    device: DeviceOpt = None,
    allow: AllowOpt = None,
    precision: PrecisionOpt = "strict",
    sandbox: SandboxOpt = "auto",
    root: Path | None = typer.Option(None, help="The folder the tools may use (default: the current one)."),
) -> None:
    """Serve kcoder's evaluator, profiler, tuner, optimize runs and skills as MCP tools (stdio by
    default), e.g. `claude mcp add kcoder -- kcoder mcp`."""
    settings = _settings(device, allow, precision=precision, sandbox=sandbox)
    folder = (root or Path.cwd()).expanduser()
    try:
        settings.validate()
        if not folder.is_dir():
            raise ValueError(f"--root {folder}: not a folder")
        if http is not None and not 0 < http < 65536:
            raise ValueError(f"--http {http}: not a port number (1-65535)")
    except ValueError as exc:
        _bad_input(str(exc), False)
        return
    if http is not None and host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: kcoder mcp serves {host}:{http} without authentication; anyone who reaches it can "
              f"run the evaluator on files under {folder.resolve()}", file=sys.stderr)
    from kcoder.mcp.server import serve

    serve(settings, folder, http_port=http, host=host)


def main() -> None:
    """Console-script entry point. SIGTERM/SIGHUP end kcoder as Ctrl-C does (kcoder.shutdown):
    every evaluation's processes are killed, and the exit status is 128 + the signal."""
    from kcoder import shutdown

    shutdown.install()
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(shutdown.exit_code() or 130)
    except SystemExit:
        if shutdown.exit_code():  # click turned the interrupt into "Aborted!" and exit 1
            sys.exit(shutdown.exit_code())
        raise


if __name__ == "__main__":
    main()
