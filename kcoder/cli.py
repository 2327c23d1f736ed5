"""The `kcoder` command line. Heavy modules (torch, litellm) load inside the commands only,
so `kcoder --help` stays instant.

Exit codes: 0 success, 1 the candidate failed (compile error, wrong, crash, timeout),
2 bad input or usage, 3 kcoder's own evaluation failed (`kcoder eval`, verdict status error),
128 + N ended by signal N (SIGTERM, SIGHUP; 130 for Ctrl-C).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from kcoder.choices import SHAPE_MODES, TuneStrategy
from kcoder.cli_options import (
    ALLOW,
    API_BASE,
    COMMIT,
    DEVICE,
    KEEP_GOING,
    MAX_COST,
    MAX_TIME,
    MODEL,
    NO_PREFLIGHT,
    PRECISION,
    PROFILE,
    RESUME,
    RUNS_DIR,
    SANDBOX,
    SUITE_OPTIONS,
    TOOL_CALL,
    VERBOSE,
    AllowOpt,
    CandidateArg,
    DeviceOpt,
    JsonOpt,
    PrecisionOpt,
    ProblemArg,
    SandboxOpt,
    ShapesOpt,
    ShapesSizesOpt,
    option,
    with_options,
)
from kcoder.env.cli import register as _register_env
from kcoder.settings import DEFAULT_BUDGET_S, DEFAULT_TARGET, Device, Settings, Stage, default_device, parse_allow

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
    """One command's Settings; the device defaults to cuda when a GPU is present. `--shapes
    NAME=SIZES` (optimize) is strict checking plus the sizes to judge the best kernel at."""
    if fields.get("shapes") is not None and fields["shapes"] not in SHAPE_MODES:
        fields["shapes"], fields["sizes"] = "strict", fields["shapes"]
    return Settings(device=device or default_device(), allow=parse_allow(allow), **fields)


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
    shapes: ShapesOpt = "off",
    as_json: JsonOpt = False,
) -> None:
    """Build, verify and time CANDIDATE against PROBLEM; print the verdict."""
    from kcoder.evaluate import evaluate
    from kcoder.problem import ProblemError

    settings = _settings(device, allow, precision=precision, stop_after=stop_after, no_compile=no_compile,
                         budget=budget, plain_build=plain_build, sandbox=sandbox, shapes=shapes)
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


@app.command("tune")
@with_options(
    option("strategy", Annotated[TuneStrategy, typer.Option(
        help="exhaustive, tpe (model-based), evolution (genetic), or auto (exhaustive when the space "
             "fits the budget).")], "auto"),
    option("trials", Annotated[int | None, typer.Option(help="Budget: points judged (default: all).")]),
    option("time_s", Annotated[float | None, typer.Option("--time", help="Budget: seconds.")]),
    option("out", Annotated[Path | None, typer.Option(
        help="Also write the tuned file here (your candidate is replaced only if this names it).")]),
    option("out_dir", Annotated[Path | None, typer.Option(
        help="Output folder (default: .kcoder/runs/tune-<candidate>-<stamp> beside the problem).")]),
    DEVICE, ALLOW, PRECISION,
    option("budget", Annotated[float, typer.Option(
        help="Seconds of measured time per point and implementation.")], 1.0),
    option("jobs", Annotated[int | None, typer.Option(
        help="Points built ahead in parallel (default: a quarter of the host's cores).")]),
    option("no_cache", Annotated[bool, typer.Option(
        "--no-cache", help="Judge every point again, ignoring stored results.")], False),
    option("no_compile", Annotated[bool, typer.Option(
        "--no-compile", help="No torch.compile baseline in the best file's final check.")], False),
    option("seed", Annotated[int, typer.Option(help="Seed of the tpe and evolution samplers.")], 0),
    option("profile_top", Annotated[int, typer.Option(
        help="cuda: Nsight Compute metrics for this many of the fastest points (0: none).")], 3),
    SANDBOX, option("as_json", JsonOpt, False))
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
@with_options(MODEL, API_BASE, DEVICE, option("target", Annotated[float, typer.Option(
    help="Stop at a verified candidate this many times faster than torch.compile.")], DEFAULT_TARGET),
    KEEP_GOING, option("max_turns", Annotated[int, typer.Option(help="Turn limit.")], 200),
    MAX_COST, MAX_TIME, RESUME, ALLOW, PRECISION, RUNS_DIR, PROFILE, TOOL_CALL, SANDBOX, COMMIT, VERBOSE,
    NO_PREFLIGHT, option("shapes", ShapesSizesOpt, "strict"),
    option("start", Annotated[str | None, typer.Option(
        help="builtin: with --model, start the model from the built-in policy's verified, tuned kernel.")]),
    option("tune_trials", Annotated[int | None, typer.Option(
        help="Points the built-in policy's tuning judges (default 6).")]))
def optimize_command(problem: ProblemArg, **options: Any) -> None:
    """Write, verify, tune and time kernels for PROBLEM until one beats torch.compile: with
    --model an LLM agent, without one kcoder's built-in policy (templates + autotuning)."""
    from kcoder.agent.optimize import optimize
    from kcoder.ui import Output

    raise typer.Exit(optimize(problem, _settings(**options), Output()))


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
    sandbox: SandboxOpt = "auto",
    # Kernel profiling is cuda only, so the option is not offered; it stays accepted so that
    # `--device cpu` gets an error that says what to do instead.
    device: str = typer.Option("cuda", hidden=True),
) -> None:
    """Profile CANDIDATE's kernels: Nsight Compute metrics per kernel, roofline against the
    measured device, ptxas resources; a torch.profiler timeline when ncu cannot run."""
    from kcoder.problem import ProblemError
    from kcoder.profile.profiler import profile_candidate

    options = Settings(device=device, precision=precision, sandbox=sandbox).profile_options(  # type: ignore[arg-type]
        full=full, ncu=ncu, ncu_timeout_s=ncu_timeout, save_prefix=save_ncu)
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
@with_options(MODEL, API_BASE, DEVICE, option("target", Annotated[float, typer.Option(
    help="Speed-up over torch.compile that counts as reaching the target.")], DEFAULT_TARGET),
    option("max_turns", Annotated[int, typer.Option(
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


# kcoder rollout, kcoder synth (kcoder/env/cli.py)
_register_env(app, _settings, _bad_input)


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
