"""The tool registry: discovers tools/<name>.py, offers their schemas, runs calls safely.

A tool file declares NAME, DESCRIPTION, PARAMETERS (a JSON schema object) and
`run(args, ctx) -> str | Observation`, a thin call into kcoder. Every failure the model can
cause (unknown tool, bad JSON, missing or mistyped arguments, a path outside the workspace)
comes back as an error observation, never as an exception out of the loop.
"""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import kcoder
from kcoder.agent.profiles import ToolAlias
from kcoder.replies import ToolCall
from kcoder.workspace import CANDIDATE, Workspace, WorkspaceError

if TYPE_CHECKING:
    from kcoder.agent.skills import SkillCatalog
    from kcoder.evaluate.options import EvalOptions
    from kcoder.profile.options import ProfileOptions
    from kcoder.profile.profiler import ProfileReport
    from kcoder.verdict import Verdict

TOOLS_DIR = kcoder.bundled_path("tools")
MAX_OUTPUT_CHARS = 12_000
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "array": (list,), "object": (dict,),
}


class ToolError(Exception):
    """An expected failure of a tool call; its message goes back to the model."""


@dataclass
class Observation:
    """What a tool call produced. `ok` False marks a failed action (for stuck detection);
    `verdict` is set by the evaluator tools; `finish` by the finish tool."""

    text: str
    ok: bool = True
    verdict: Verdict | None = None
    candidate: Path | None = None
    finish: bool = False


Evaluator = Callable[[Path, Path, "EvalOptions"], "Verdict"]
Profiler = Callable[[Path, Path, "ProfileOptions"], "ProfileReport"]


# The judge and the profiler are imported on first use, so that discovering or listing the
# tools (`kcoder skills`, other agents) does not load them.
def run_evaluator(problem: Path, candidate: Path, options: EvalOptions) -> Verdict:
    """kcoder's judge, kcoder.evaluate.evaluate: the evaluator unless one is injected."""
    from kcoder.evaluate import evaluate

    return evaluate(problem, candidate, options)


def run_profiler(problem: Path, candidate: Path, options: ProfileOptions) -> ProfileReport:
    """kcoder.profile.profiler.profile_candidate: the profiler unless one is injected."""
    from kcoder.profile.profiler import profile_candidate

    return profile_candidate(problem, candidate, options)


@dataclass
class ToolContext:
    """What tools may touch: the workspace, evaluation options, the evaluator, the skills.

    `evaluate` replaces kcoder's judge (tests, chat's status line); `extra["profile"]`
    replaces the profiler the same way."""

    workspace: Workspace
    options: EvalOptions
    skills: SkillCatalog | None = None
    evaluate: Evaluator | None = None
    max_output_chars: int = MAX_OUTPUT_CHARS
    extra: dict[str, Any] = field(default_factory=dict)

    def evaluator(self) -> Evaluator:
        """The evaluator to call: the injected one, else kcoder's judge."""
        return self.evaluate or run_evaluator

    def profiler(self) -> Profiler:
        """The profiler to call: the injected one, else kcoder's."""
        return self.extra.get("profile") or run_profiler


@dataclass
class ToolSpec:
    """One discovered tool."""

    name: str
    description: str
    parameters: dict[str, Any]
    run: Callable[[dict[str, Any], ToolContext], str | Observation]
    path: Path


def truncate(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    """Keep the head and tail of a long text, with a note saying how much was cut."""
    if len(text) <= limit:
        return text
    head, tail = int(limit * 0.7), int(limit * 0.25)
    cut = len(text) - head - tail
    return (f"{text[:head]}\n[... {cut} characters omitted (output truncated to {limit}); "
            f"read a narrower range to see them ...]\n{text[-tail:]}")


def _load_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"kcoder_tools.{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def discover_tools(directory: Path = TOOLS_DIR) -> dict[str, ToolSpec]:
    """Every tool file in `directory`, by name. A file that does not declare a tool properly
    raises ImportError naming the file: shipping a broken tool is a bug, not a runtime event."""
    tools: dict[str, ToolSpec] = {}
    for path in sorted(directory.glob("*.py")):
        if path.name.startswith("_"):
            continue
        module = _load_module(path)
        missing = [a for a in ("NAME", "DESCRIPTION", "PARAMETERS", "run") if not hasattr(module, a)]
        if missing or module.NAME != path.stem:
            raise ImportError(f"{path}: a tool file needs NAME (= file name), DESCRIPTION, "
                              f"PARAMETERS and run(); missing: {', '.join(missing) or 'NAME match'}")
        tools[module.NAME] = ToolSpec(module.NAME, module.DESCRIPTION.strip(), module.PARAMETERS,
                                      module.run, path)
    return tools


class Toolbox:
    """The tools offered to one model, under the names its profile gives them."""

    def __init__(self, aliases: list[ToolAlias], tools: dict[str, ToolSpec] | None = None) -> None:
        available = discover_tools() if tools is None else tools
        unknown = [a.tool for a in aliases if a.tool not in available]
        if unknown:
            raise ValueError(f"profile names unknown tools: {', '.join(unknown)}")
        self._offered: dict[str, tuple[ToolSpec, ToolAlias]] = {
            a.exposed: (available[a.tool], a) for a in aliases}

    @property
    def names(self) -> list[str]:
        return list(self._offered)

    def _schema_of(self, spec: ToolSpec, alias: ToolAlias) -> dict[str, Any]:
        to_exposed = {kc: ex for ex, kc in alias.args.items()}
        params = json.loads(json.dumps(spec.parameters))  # deep copy; the spec stays shared
        props = params.get("properties", {})
        params["properties"] = {to_exposed.get(k, k): v for k, v in props.items()}
        if "required" in params:
            params["required"] = [to_exposed.get(k, k) for k in params["required"]]
        return params

    def schemas(self) -> list[dict[str, Any]]:
        """OpenAI-style tool declarations, for native tool calling."""
        return [{"type": "function",
                 "function": {"name": exposed, "description": spec.description,
                              "parameters": self._schema_of(spec, alias)}}
                for exposed, (spec, alias) in self._offered.items()]

    def describe_text(self) -> str:
        """The tools as prose + JSON schemas, for the text tool-call protocol."""
        parts = []
        for exposed, (spec, alias) in self._offered.items():
            schema = json.dumps(self._schema_of(spec, alias).get("properties", {}))
            parts.append(f"- {exposed}: {spec.description}\n  arguments: {schema}")
        return "\n".join(parts)

    def _usage(self, exposed: str) -> str:
        spec, alias = self._offered[exposed]
        params = self._schema_of(spec, alias)
        req = set(params.get("required", []))
        args = [f"{k}{'' if k in req else '?'}" for k in params.get("properties", {})]
        return f"{exposed}({', '.join(args)})"

    def _arguments(self, call: ToolCall) -> dict[str, Any]:
        """Parse and check a call's arguments against the schema; ToolError when wrong."""
        spec, alias = self._offered[call.name]
        raw = call.arguments.strip() if isinstance(call.arguments, str) else call.arguments
        try:
            args = json.loads(raw, strict=False) if isinstance(raw, str) and raw else (raw or {})
        except json.JSONDecodeError as exc:
            raise ToolError(f"arguments are not valid JSON ({exc.msg} at position {exc.pos})") from exc
        if not isinstance(args, dict):
            raise ToolError("arguments must be a JSON object")
        args = {alias.args.get(k, k): v for k, v in args.items()}
        props = spec.parameters.get("properties", {})
        missing = [k for k in spec.parameters.get("required", []) if k not in args]
        if missing:
            to_exposed = {kc: ex for ex, kc in alias.args.items()}
            raise ToolError("missing required argument(s): "
                            + ", ".join(to_exposed.get(k, k) for k in missing))
        for key, value in list(args.items()):
            if key not in props:
                del args[key]  # extra keys (e.g. an "explanation") are harmless: drop them
                continue
            want = props[key].get("type")
            ok_types = _JSON_TYPES.get(want) if isinstance(want, str) else None
            bad_bool = want in ("integer", "number") and isinstance(value, bool)
            if ok_types and (not isinstance(value, ok_types) or bad_bool):
                raise ToolError(f"argument {key!r} must be a {want}, got {type(value).__name__}")
        return args

    def call(self, call: ToolCall, ctx: ToolContext) -> Observation:
        """Run one tool call. Errors come back as an Observation with ok=False."""
        if call.error:
            return Observation(f"Error: {call.error}. Write one tool call as "
                               '{"name": "<tool>", "arguments": {...}}.', ok=False)
        if call.name not in self._offered:
            return Observation(f"Error: unknown tool {call.name!r}. Available tools: "
                               + ", ".join(self.names) + ".", ok=False)
        spec, _ = self._offered[call.name]
        try:
            args = self._arguments(call)
            result = spec.run(args, ctx)
        except (ToolError, WorkspaceError) as exc:
            return Observation(f"Error calling {call.name}: {exc}. Usage: {self._usage(call.name)}",
                               ok=False)
        except (OSError, UnicodeDecodeError) as exc:
            return Observation(f"Error calling {call.name}: {type(exc).__name__}: {exc}", ok=False)
        obs = result if isinstance(result, Observation) else Observation(str(result))
        obs.text = truncate(obs.text, ctx.max_output_chars)
        return obs


# --- the evaluator tools share this -----------------------------------------------------------
def _fmt_us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} us"


def _fmt_x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def format_verdict(v: Verdict, stop_after: str = "timing", log_chars: int = 4000) -> str:
    """A short observation for the model: stage, reason, speed-ups, trimmed log."""
    head = "PASSED" if stage_passed(v, stop_after) else "FAILED"
    lines = [(f"{head} {stop_after}: stage {v.stage}, compiled {v.compiled}, correct {v.correct}, "
             f"reward {v.reward}"), f"reason: {v.reason}"]
    if v.candidate_us is not None:
        lines.append(f"timing (median): candidate {_fmt_us(v.candidate_us)}, eager "
                     f"{_fmt_us(v.eager_us)}, torch.compile {_fmt_us(v.compile_us)}")
        ci = v.speedup_vs_compile_ci
        lines.append(f"speed-up vs eager {_fmt_x(v.speedup_vs_eager)}, vs torch.compile "
                     f"{_fmt_x(v.speedup_vs_compile)}"
                     + (f" (90% interval {ci[0]:.2f}-{ci[1]:.2f})" if ci else ""))
    if v.max_abs_err is not None:
        rel = "n/a" if v.rel_norm_err is None else f"{v.rel_norm_err:.3g}"
        lines.append(f"max abs err {v.max_abs_err:.3g}, rel-norm err {rel}")
    lines += [f"note: {n}" for n in v.notes[:5]]
    if v.log:
        lines.append("log:\n" + truncate(v.log.strip(), log_chars))
    return "\n".join(lines)


def stage_passed(v: Verdict, stop_after: str) -> bool:
    """Whether a verdict passed the stage it was asked to reach."""
    return v.compiled if stop_after in ("compile", "build") else v.correct


def evaluate_candidate(args: dict[str, Any], ctx: ToolContext, stop_after: str) -> Observation:
    """Run the evaluator on the workspace file `args["path"]` (default the candidate) up to
    `stop_after`."""
    target = ctx.workspace.resolve(args.get("path") or CANDIDATE)
    if not target.is_file():
        raise ToolError(f"{ctx.workspace.relative(target)} does not exist; write it first")
    return judge_file(ctx, target, stop_after)


def judge_file(ctx: ToolContext, path: Path, stop_after: str) -> Observation:
    """Snapshot `path` into the workspace and run the evaluator on the snapshot up to
    `stop_after`; the observation carries the verdict and the snapshot."""
    snapshot = ctx.workspace.snapshot(path)
    started = time.monotonic()
    verdict = ctx.evaluator()(ctx.workspace.reference, snapshot, replace(ctx.options, stop_after=stop_after))
    took = time.monotonic() - started
    text = (format_verdict(verdict, stop_after) + f"\n(candidate {ctx.workspace.relative(path)}"
            f", judged as {ctx.workspace.relative(snapshot)}, {took:.1f} s)")
    return Observation(text, ok=stage_passed(verdict, stop_after), verdict=verdict,
                       candidate=snapshot)


def check_plain_build(ctx: ToolContext, candidate: Path, verdict: Verdict) -> Verdict:
    """`verdict` (of `candidate`) with its plain_build field set: the candidate verified again,
    built exactly as plain load_inline builds it, not through kcoder's faster build path. What
    a user takes away or commits must not rest on that path. Skipped when the run already
    builds plainly or the check passed before; the check is recorded in the trajectory."""
    if not ctx.options.fast_build or verdict.plain_build == "verified":
        return verdict
    snapshot = ctx.workspace.snapshot(candidate)
    plain = ctx.evaluator()(ctx.workspace.reference, snapshot, ctx.options.plain_build_check())
    ctx.workspace.append({"type": "plain_build", "candidate": ctx.workspace.relative(snapshot),
                          "verdict": plain.to_dict()})
    return replace(verdict, plain_build="verified" if plain.correct else plain.reason)
