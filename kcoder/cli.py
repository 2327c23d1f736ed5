"""The `kcoder` command line. Heavy modules (torch, litellm) load inside the commands only,
so `kcoder --help` stays instant.

Exit codes: 0 success, 1 the candidate failed (compile error, wrong, crash, timeout),
2 bad input or usage.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="kcoder: faster PyTorch modules with custom kernels, honestly verified.")


@app.callback()
def _root() -> None:
    """kcoder: faster PyTorch modules with custom kernels, honestly verified."""


def _default_device() -> str:
    """cuda when a GPU is present, else cpu (checked without importing torch)."""
    return "cuda" if Path("/dev/nvidia0").exists() or Path("/dev/nvidiactl").exists() else "cpu"


def _parse_allow(allow: str | None) -> list[str]:
    return [a.strip() for a in (allow or "").split(",") if a.strip()]


def _bad_input(message: str, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"error": message}))
    else:
        from kcoder.ui import console

        console(stderr=True).print(f"[red]error:[/] {message}")
    raise typer.Exit(2)


@app.command("eval")
def eval_command(
    problem: Path = typer.Argument(..., help="KernelBench-style problem file (Model, get_inputs, get_init_inputs)."),
    candidate: Path = typer.Argument(..., help="Candidate file defining ModelNew (kernels via load_inline)."),
    device: str | None = typer.Option(None, help="cuda or cpu (default: cuda when a GPU is present)."),
    allow: str | None = typer.Option(None, help="Library ops the candidate may call: gemm,conv (cuBLAS/cuDNN)."),
    precision: str = typer.Option("strict", help="strict (fp32 is fp32) or relaxed (TF32/bf16; baselines too)."),
    stop_after: str = typer.Option("timing", help="build, verify or timing."),
    no_compile: bool = typer.Option(False, "--no-compile", help="Skip the torch.compile baseline."),
    budget: float = typer.Option(3.0, help="Seconds of measured time per implementation (at least 10 rounds)."),
    plain_build: bool = typer.Option(False, "--plain-build",
                                     help="Build exactly as plain load_inline does (no precompiled header)."),
    as_json: bool = typer.Option(False, "--json", help="Print exactly one JSON object."),
) -> None:
    """Build, verify and time CANDIDATE against PROBLEM; print the verdict."""
    from kcoder.evaluate import EvalOptions, evaluate
    from kcoder.problem import ProblemError

    options = EvalOptions(device=device or _default_device(), allow=_parse_allow(allow),
                          precision=precision, stop_after=stop_after,
                          compile_baseline=not no_compile, timing_budget_s=budget,
                          fast_build=not plain_build)
    try:
        options.validate()
        verdict = evaluate(problem, candidate, options)
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
    if verdict.stage == "problem":
        raise typer.Exit(2)
    raise typer.Exit(0 if verdict.correct else 1)


# Options shared by the agent commands (optimize, chat): one declaration each.
AgentProblem = Annotated[Path, typer.Argument(help="KernelBench-style problem file; it is never modified.")]
ModelOpt = Annotated[str | None, typer.Option(envvar="KCODER_MODEL",
                                              help="litellm model, e.g. anthropic/..., openai/..., hosted_vllm/NAME.")]
ApiBaseOpt = Annotated[str | None, typer.Option(help="OpenAI-compatible server URL (vLLM, SGLang ...).")]
DeviceOpt = Annotated[str | None, typer.Option(help="cuda or cpu (default: cuda when a GPU is present).")]
ResumeOpt = Annotated[Path | None, typer.Option(help="Continue the run in this run directory.")]
AllowOpt = Annotated[str | None, typer.Option(help="Library ops the candidate may call: gemm,conv.")]
PrecisionOpt = Annotated[str, typer.Option(help="strict or relaxed.")]
RunsDirOpt = Annotated[Path | None, typer.Option(help="Where run directories go (.kcoder/runs beside the problem).")]
ProfileOpt = Annotated[str | None, typer.Option(help="Model profile from kcoder/agent/profiles.json, e.g. cuda-agent.")]
ToolCallOpt = Annotated[str | None, typer.Option(help="native, text or auto tool calling.")]


@app.command("optimize")
def optimize_command(
    problem: AgentProblem,
    model: ModelOpt = None,
    api_base: ApiBaseOpt = None,
    device: DeviceOpt = None,
    target: float = typer.Option(1.05, help="Stop at a verified candidate this many times faster than torch.compile."),
    keep_going: bool = typer.Option(False, "--keep-going", help="Continue after reaching the target."),
    max_turns: int = typer.Option(200, help="Turn limit."),
    max_cost: float | None = typer.Option(None, help="Cost limit in USD."),
    max_time: float | None = typer.Option(None, help="Time limit in seconds."),
    resume: ResumeOpt = None,
    allow: AllowOpt = None,
    precision: PrecisionOpt = "strict",
    runs_dir: RunsDirOpt = None,
    profile: ProfileOpt = None,
    tool_call: ToolCallOpt = None,
    commit: bool = typer.Option(False, "--commit", help="Commit the best verified kernel to branch kcoder/<problem>."),
) -> None:
    """Let the agent write, verify and time kernels for PROBLEM until it beats torch.compile."""
    from kcoder.agent.optimize import optimize
    from kcoder.ui import console

    out = console()
    code = optimize(problem, model=model, api_base=api_base, device=device or _default_device(),
                    target=target, keep_going=keep_going, max_turns=max_turns, max_cost=max_cost,
                    max_time=max_time, resume=resume, allow=_parse_allow(allow), precision=precision,
                    runs_dir=runs_dir, console=out, profile=profile, tool_call=tool_call)
    if commit and code == 0:
        code = _commit_best(problem, runs_dir, resume, out) or code
    raise typer.Exit(code)


def _commit_best(problem: Path, runs_dir: Path | None, resume: Path | None, out) -> int:
    """Commit the newest run's best candidate; return 2 on a git problem (nothing is lost)."""
    from kcoder.gitops import GitOpsError, commit_accepted
    from kcoder.verdict import plain_build_ok

    root = resume or max((runs_dir or problem.resolve().parent / ".kcoder" / "runs").glob(f"{problem.stem}-*"),
                         key=lambda p: p.stat().st_mtime, default=None)
    report_path = root / "report.json" if root else None
    if not report_path or not report_path.exists():
        out.print("[red]error:[/] no report to commit")
        return 2
    report = json.loads(report_path.read_text())
    best = report.get("best") or {}
    data = {**best, "model": report.get("model", ""), "problem": problem.stem}
    md = root / "report.md"
    try:
        result = commit_accepted(problem, root / "best" / "model_new.py", data,
                                 report_md=md.read_text() if md.exists() else None,
                                 verdict_correct=bool(best.get("correct")) and plain_build_ok(best))
    except GitOpsError as exc:
        out.print(f"[red]error:[/] {exc}")
        return 2
    out.print(f"committed {result.commit[:10]} on branch {result.branch}")
    return 0


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

        from kcoder.ui import console

        table = Table("name", "source", "status", "description")
        for s in skills:
            status = "[green]ok[/]" if s.valid else "[red]invalid: " + "; ".join(s.problems) + "[/]"
            table.add_row(s.name, s.source, status, s.description[:90])
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
    problem: Path = typer.Argument(..., help="KernelBench-style problem file (Model, get_inputs, get_init_inputs)."),
    candidate: Path = typer.Argument(..., help="Candidate file defining ModelNew (CUDA kernels via load_inline)."),
    device: str = typer.Option("cuda", help="cuda: kernel profiling needs a CUDA GPU."),
    full: bool = typer.Option(False, "--full", help="More ncu sections; every stall and rule; raw metrics in --json."),
    summary: bool = typer.Option(False, "--summary", help="Print the compact text the agent's profile tool returns."),
    precision: str = typer.Option("strict", help="strict (TF32 off) or relaxed (TF32 allowed)."),
    ncu: str | None = typer.Option(None, help="The ncu binary (default: $KCODER_NCU, PATH, $CUDA_HOME/bin)."),
    ncu_timeout: float = typer.Option(300.0, help="Seconds before ncu and the profiled process are killed."),
    save_ncu: str | None = typer.Option(None, help="Keep ncu's output as PREFIX.ncu-rep, PREFIX_raw.csv, "
                                        "PREFIX_details.csv."),
    as_json: bool = typer.Option(False, "--json", help="Print exactly one JSON object."),
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
def chat_command(
    problem: AgentProblem,
    model: ModelOpt = None,
    api_base: ApiBaseOpt = None,
    device: DeviceOpt = None,
    target: float = typer.Option(1.05, help="Speed-up over torch.compile that counts as reaching the target."),
    max_turns: int = typer.Option(30, help="Model turns per message before the model must hand back."),
    max_cost: float | None = typer.Option(None, help="Cost limit for the session in USD."),
    resume: ResumeOpt = None,
    allow: AllowOpt = None,
    precision: PrecisionOpt = "strict",
    runs_dir: RunsDirOpt = None,
    profile: ProfileOpt = None,
    tool_call: ToolCallOpt = None,
) -> None:
    """Refine kernels for PROBLEM in conversation; /help lists the slash commands (/eval, /commit ...)."""
    from kcoder.chat.repl import run_chat
    from kcoder.chat.session import Settings
    from kcoder.evaluate.options import EvalOptions

    settings = Settings(model=model, api_base=api_base, profile=profile, tool_call=tool_call,
                        target=target, max_cost=max_cost, turns_per_message=max(1, max_turns),
                        runs_dir=runs_dir)
    options = EvalOptions(device=device or _default_device(), allow=_parse_allow(allow),
                          precision=precision)
    raise typer.Exit(run_chat(problem, settings, options, resume=resume))


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
