"""`kcoder optimize`: wire a model, the tools, the skills and a run directory into the loop.

Exit codes: 0 a verified candidate was produced (best/model_new.py), 1 none was, 2 bad
input or usage (no model, bad problem file, unknown option value, missing API key).
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from kcoder.agent import prompts
from kcoder.agent.llm import LLM, missing_key_message
from kcoder.agent.loop import Agent, AgentStop, Limits, RunResult
from kcoder.agent.profiles import Profile, concrete_tool_call_mode, resolve_profile
from kcoder.agent.skills import SkillCatalog
from kcoder.agent.toolbox import Evaluator, Toolbox, ToolContext
from kcoder.evaluate.options import EvalOptions
from kcoder.verdict import plain_build_ok
from kcoder.workspace import Workspace, WorkspaceError

NO_MODEL_MESSAGE = """\
kcoder optimize needs a model to write kernels, and none was given. There is no built-in
(no-LLM) policy yet, so kcoder will not pretend to optimize without one. Pass --model:
  kcoder optimize model.py --model anthropic/claude-sonnet-4-5        (set ANTHROPIC_API_KEY)
  kcoder optimize model.py --model openai/gpt-5                        (set OPENAI_API_KEY)
  kcoder optimize model.py --model hosted_vllm/<served-name> --api-base http://localhost:8000/v1
                                                  (a local vLLM/SGLang server; no key needed)
To judge a kernel you wrote yourself: kcoder eval model.py model_new.py"""

# The cuda-agent profile speaks the CUDA Agent environment's commands through `bash`.
_CUDA_AGENT_NOTE = """\
In this environment the bash tool maps `bash utils/compile.sh` to compile,
`python3 -m utils.verification` to verify and `python3 -m utils.profiling` to benchmark;
there is no other shell. The candidate is the single file model_new.py (no kernels/ folder,
no binding.cpp): put the CUDA sources in load_inline inside it."""


class _Terminal:
    """Renders a run as it happens: streamed model text, tool calls, verdict lines."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self._mid_line = False  # streamed text not yet ended by a newline

    def text(self, chunk: str) -> None:
        self.console.print(chunk, end="", markup=False, highlight=False)
        self._mid_line = not chunk.endswith("\n")

    def notice(self, line: str) -> None:
        from rich.text import Text

        self._newline()
        self.console.print(Text(line, style="yellow"))

    def _newline(self) -> None:
        if self._mid_line:
            self.console.print()
            self._mid_line = False

    def event(self, kind: str, data: dict[str, Any]) -> None:
        from rich.text import Text  # model and tool text may hold [brackets]: never markup

        c = self.console
        if kind == "turn":
            c.print(Text(f"\n── turn {data['turn']} ──", style="dim"))
            return
        self._newline()
        if kind == "tool_call":
            args = data["arguments"]
            args = args if isinstance(args, str) else json.dumps(args)
            short = args[:100] + ("…" if len(args) > 100 else "")
            c.print(Text.assemble((f"→ {data['name']} ", "cyan"), (short, "dim")))
        elif kind == "observation":
            lines = data["text"].splitlines() or [""]
            style = "green" if data["ok"] else "red"
            for line in lines[: 2 if data.get("verdict") else 1]:
                c.print(Text(f"  {line[:160]}", style=style))
        elif kind == "best":
            sc = data["verdict"].get("speedup_vs_compile")
            c.print(Text("  ★ new best verified candidate"
                         + (f" ({sc:.2f}x vs torch.compile)" if sc else ""), style="bold green"))
        elif kind == "notice":
            c.print(Text(data["text"], style="dim"))


def _fail(console: Any, message: str) -> int:
    from rich.text import Text

    console.print(Text.assemble(("error: ", "red"), message))
    return 2


def optimize(problem: Path, *, model: str | None, api_base: str | None, device: str,
             target: float, keep_going: bool, max_turns: int, max_cost: float | None,
             max_time: float | None, resume: Path | None, allow: list[str], precision: str,
             runs_dir: Path | None, console: Any, profile: str | None = None,
             tool_call: str | None = None, eval_options: EvalOptions | None = None,
             evaluator: Evaluator | None = None, stream: bool = True) -> int:
    """Run the agent on `problem` (or continue the run in `resume`) and return the exit code.

    `profile` / `tool_call` override the model profile and its tool-call mode (native/text);
    `eval_options` supplies evaluation budgets (device, allow, precision are set from the
    arguments); `evaluator` replaces kcoder.evaluate.evaluate (tests).
    """
    if not model:
        console.print(NO_MODEL_MESSAGE, highlight=False, markup=False)
        return 2
    try:
        options = replace(eval_options or EvalOptions(), device=device, allow=list(allow),
                          precision=precision)
        options.validate()
        if target <= 0 or max_turns < 1:
            raise ValueError("--target must be > 0 and --max-turns at least 1")
        prof = resolve_profile(model, profile, tool_call)
    except ValueError as exc:
        return _fail(console, str(exc))
    key_problem = missing_key_message(model, api_base)
    if key_problem:
        return _fail(console, key_problem)
    try:
        ws = _workspace(problem, resume, runs_dir)
    except (WorkspaceError, OSError) as exc:
        return _fail(console, str(exc))
    except Exception as exc:
        if type(exc).__name__ != "ProblemError":
            raise
        return _fail(console, str(exc))

    agent, tool_mode = _build_agent(ws, prof, model, api_base, options, evaluator, console,
                                    stream, Limits(target=target, keep_going=keep_going,
                                                   max_turns=max_turns, max_cost=max_cost,
                                                   max_time=max_time))
    meta = {"model": model, "profile": prof.name, "tool_mode": tool_mode, "device": device,
            "target": target, "api_base": api_base, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    from rich.text import Text

    console.print(Text.assemble(("kcoder", "bold"), f" run directory: {ws.root}  ·  model {model} "
                                f"({prof.name}, {tool_mode} tool calls)"))
    try:
        if resume:
            agent.resume(meta)
        else:
            agent.start(_system_prompt(agent, prof, options, target, tool_mode),
                        prompts.task_prompt(ws.reference_source(), device), meta)
    except AgentStop as exc:
        return _fail(console, str(exc))
    result = agent.run()
    report = build_report(ws, result, model=model, profile=prof.name, device=device,
                          target=target)
    ws.write_report(report)
    print_summary(console, report)
    return 0 if result.best and plain_build_ok(result.best) else 1


def _workspace(problem: Path, resume: Path | None, runs_dir: Path | None) -> Workspace:
    if resume:
        return Workspace.open(resume)
    from kcoder.problem import load_problem

    loaded = load_problem(problem)  # raises ProblemError naming the file
    return Workspace.create(Path(loaded.path), runs_dir)


def _build_agent(ws: Workspace, prof: Profile, model: str, api_base: str | None,
                 options: EvalOptions, evaluator: Evaluator | None, console: Any, stream: bool,
                 limits: Limits) -> tuple[Agent, str]:
    tool_mode = concrete_tool_call_mode(prof, model)
    term = _Terminal(console)
    llm = LLM(model=model, api_base=api_base, tool_mode=tool_mode, temperature=prof.temperature,
              max_output_tokens=prof.max_output_tokens, stream=stream, on_text=term.text,
              on_notice=term.notice)
    ctx = ToolContext(workspace=ws, options=options, skills=SkillCatalog.discover(),
                      evaluate=evaluator)
    budget = max(8_000, prof.context_window - prof.max_output_tokens - 2_000)
    agent = Agent(llm, Toolbox(prof.tools), ctx, limits, context_budget=budget,
                  on_event=term.event)
    return agent, tool_mode


def _system_prompt(agent: Agent, prof: Profile, options: EvalOptions, target: float,
                   tool_mode: str) -> str:
    text = prompts.system_prompt(
        device=options.device, target=target, allow=options.allow, precision=options.precision,
        skills_listing=agent.ctx.skills.prompt_listing() if agent.ctx.skills else "",
        tool_mode=tool_mode, tools_text=agent.toolbox.describe_text())
    return text + ("\n\n" + _CUDA_AGENT_NOTE if "bash" in agent.toolbox.names else "")


def build_report(ws: Workspace, result: RunResult, *, model: str, profile: str, device: str,
                 target: float) -> dict[str, Any]:
    """The data of report.json (report.md is rendered from it)."""
    best = result.best or {}
    n_candidates = len(list((ws.root / "candidates").glob("model_new_*.py")))
    return {
        "problem": ws.problem_path().name, "problem_path": str(ws.problem_path()),
        "run_dir": str(ws.root), "status": result.status, "message": result.message,
        "target": target, "target_reached": result.target_reached, "model": model,
        "profile": profile, "device": device, "device_name": best.get("device_name", ""),
        "turns": result.turns, "prompt_tokens": result.usage.prompt_tokens,
        "completion_tokens": result.usage.completion_tokens, "cost": result.usage.cost,
        "llm_calls": result.usage.calls, "retries": result.usage.retries,
        "seconds": round(result.seconds, 1), "candidates_evaluated": n_candidates,
        "best_path": str(ws.best_dir / "model_new.py") if result.best else None,
        "best": result.best,
    }


def print_summary(console: Any, report: dict[str, Any]) -> None:
    """The final rich table."""
    from rich.table import Table
    from rich.text import Text

    best = report.get("best") or {}
    ok = bool(best)
    plain = best.get("plain_build")
    title = ("[red]FAILS WHEN BUILT BY PLAIN load_inline[/]" if not plain_build_ok(best) else
             "[green]TARGET REACHED[/]" if report["target_reached"] else
             "[green]VERIFIED CANDIDATE[/]" if ok else "[red]NO VERIFIED CANDIDATE[/]")
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")

    def x(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}x"

    rows = [
        ("outcome", f"{report['status']}: {report['message']}"),
        ("best", report["best_path"] or "-"),
        ("verdict", best.get("reason", "-")),
        ("vs eager", x(best.get("speedup_vs_eager"))),
        ("vs torch.compile", f"{x(best.get('speedup_vs_compile'))} (target {report['target']:.2f}x)"),
        ("plain build", "-" if plain is None else "verified (built as plain load_inline builds it)"
         if plain == "verified" else f"FAILED: {plain}"),
        ("model", f"{report['model']} ({report['profile']})"),
        ("turns", str(report["turns"])),
        ("tokens", f"{report['prompt_tokens']:,} in / {report['completion_tokens']:,} out"),
        ("cost", f"${report['cost']:.4f}"),
        ("report", str(Path(report["run_dir"]) / "report.md")),
    ]
    for name, value in rows:
        table.add_row(name, Text(value))  # Text: a verdict reason may hold [brackets]
    console.print()
    console.print(table)
