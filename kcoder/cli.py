"""The `kcoder` command line. Heavy modules (torch, litellm) load inside the commands only,
so `kcoder --help` stays instant.

Exit codes: 0 success, 1 the candidate failed (compile error, wrong, crash, timeout),
2 bad input or usage.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

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
    as_json: bool = typer.Option(False, "--json", help="Print exactly one JSON object."),
) -> None:
    """Build, verify and time CANDIDATE against PROBLEM; print the verdict."""
    from kcoder.harness import EvalOptions, evaluate
    from kcoder.problem import ProblemError

    options = EvalOptions(device=device or _default_device(), allow=_parse_allow(allow),
                          precision=precision, stop_after=stop_after,
                          compile_baseline=not no_compile, timing_budget_s=budget)
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


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
