"""The command-line options that several `kcoder` commands share, each declared once, and the
way a command takes a declared list of them (`with_options`). Light on purpose, like cli.py:
nothing heavy is imported here."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import typer

from kcoder.settings import (
    BUILTIN,
    DEFAULT_BUDGET_S,
    DEFAULT_TARGET,
    Device,
    Precision,
    SandboxMode,
    ShapeMode,
    Stage,
    ToolCallMode,
)

F = TypeVar("F", bound=Callable[..., Any])

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


def option(name: str, annotation: Any, default: Any = None) -> inspect.Parameter:
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
MODEL = option("model", Annotated[str | None, typer.Option(
    envvar="KCODER_MODEL", help=f"litellm model, e.g. anthropic/..., openai/..., hosted_vllm/NAME; {BUILTIN}: "
    "kcoder's built-in policy (no LLM).")])
API_BASE = option("api_base", Annotated[str | None, typer.Option(
    help="OpenAI-compatible server URL (vLLM, SGLang ...).")])
DEVICE = option("device", DeviceOpt)
KEEP_GOING = option("keep_going", Annotated[bool, typer.Option(
    "--keep-going", help="Continue after reaching the target, and when the speed of light puts it "
    "out of reach.")], False)
NO_PREFLIGHT = option("preflight", Annotated[bool, typer.Option(
    "--preflight/--no-preflight", help="Measure the baselines and the speed of light before the first turn "
    "(stop when the target is out of reach).")], True)
MAX_COST = option("max_cost", Annotated[float | None, typer.Option(help="Cost limit in USD.")])
MAX_TIME = option("max_time", Annotated[float | None, typer.Option(help="Time limit in seconds.")])
RESUME = option("resume", Annotated[Path | None, typer.Option(help="Continue the run in this run directory.")])
ALLOW = option("allow", AllowOpt)
PRECISION = option("precision", PrecisionOpt, "strict")
RUNS_DIR = option("runs_dir", Annotated[Path | None, typer.Option(
    help="Where run directories go (.kcoder/runs beside the problem).")])
PROFILE = option("profile", Annotated[str | None, typer.Option(
    help="Model profile from kcoder/agent/profiles.json, e.g. cuda-agent.")])
TOOL_CALL = option("tool_call", Annotated[ToolCallMode | None, typer.Option(
    help="native, text or auto tool calling.")])
SANDBOX = option("sandbox", SandboxOpt, "auto")
ShapesOpt = Annotated[ShapeMode, typer.Option(
    help="Verify at batch sizes the judge draws too (1, a prime, half, double): off, auto (a wrong answer "
         "there is a note) or strict (a refusal).")]
ShapesSizesOpt = Annotated[str, typer.Option(
    "--shapes", help="Verify at batch sizes the judge draws too: off, auto (a wrong answer there is a note) or "
    "strict (a refusal); or NAME=SIZES (e.g. x=1,257,4096; * is the problem's own): strict, and the best kernel "
    "judged again at each size, with its speed-up vs torch.compile there.")]
VERBOSE = option("verbose", Annotated[bool, typer.Option(
    "--verbose", help="Show whole files and diffs after each tool call (default: one line per call).")], False)
COMMIT = option("commit", Annotated[bool, typer.Option(
    "--commit", help="Commit the best verified kernel to branch kcoder/<problem>.")], False)



# kcoder suite's options (its own, then the evaluation and agent ones it passes on).
SUITE_OPTIONS = (
    option("mode", Annotated[Literal["eval", "optimize"], typer.Option(
        help="eval: judge existing solutions (--solutions); optimize: kcoder optimize per problem.")], "eval"),
    option("solutions", Annotated[Path | None, typer.Option(help="eval: folder of solutions matched by name "
            "(NAME.py, NAME_solution*.py, NAME/solution_<device>.py, NAME/model_new.py).")]),
    option("level", Annotated[int | None, typer.Option(help="PROBLEMS are KernelBench checkouts: level{N}/*.py.")]),
    option("out", Annotated[Path | None, typer.Option(help="The suite's folder (.kcoder/suites/suite-<stamp>).")]),
    option("resume_dir", Annotated[Path | None, typer.Option(
        "--resume", help="Resume the suite in this folder: only problems without a result run.")]),
    option("backend", Annotated[Literal["auto", "ray", "pool"], typer.Option(
        help="ray (local runtime or --ray-address), pool (local processes); auto: ray when installed.")], "auto"),
    option("ray_address", Annotated[str | None, typer.Option(help="An existing Ray cluster's address.")]),
    option("workers", Annotated[int | None, typer.Option(
        help="Concurrent evaluations (default: one per GPU; cpu: one per 8 cores).")]),
    option("results", Annotated[Path | None, typer.Option(help="eval: a results log kept across suites: problems "
            "it has for the same candidate, commit, device and options are skipped; new verdicts appended.")]),
    option("force", Annotated[bool, typer.Option("--force", help="Run problems --results or the folder has.")], False),
    option("limit", Annotated[int | None, typer.Option(help="Run at most this many problems (the rest later).")]),
    option("time_budget", Annotated[float | None, typer.Option(
        help="Start no problem after this many seconds (the rest later).")]),
    MODEL, API_BASE, DEVICE, ALLOW, PRECISION, SANDBOX,
    option("stop_after", Annotated[Stage, typer.Option(help="build, verify or timing.")], "timing"),
    option("no_compile", Annotated[bool, typer.Option("--no-compile", help="No torch.compile baseline.")], False),
    option("budget", Annotated[float, typer.Option(help="Measured seconds per implementation.")], DEFAULT_BUDGET_S),
    option("target", Annotated[float, typer.Option(help="optimize: target over torch.compile.")], DEFAULT_TARGET),
    option("max_turns", Annotated[int, typer.Option(help="optimize: turn limit per problem.")], 200),
    MAX_COST, MAX_TIME, KEEP_GOING, NO_PREFLIGHT, option("as_json", JsonOpt, False))
