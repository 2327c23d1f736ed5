"""The values each option may take, declared once: the CLI's option types, the agent tools'
JSON enums, the MCP tools' parameters and every `validate()` read them from here.

A leaf module (it imports nothing of kcoder), so that the evaluator's and the profiler's own
options can check against it without importing the settings that build them. settings.py
re-exports these; the CLI, the tools and MCP import them from there.
"""

from __future__ import annotations

from typing import Literal, get_args

Device = Literal["cpu", "cuda"]
Stage = Literal["compile", "build", "verify", "timing"]  # where an evaluation stops (compile: host work only)
Precision = Literal["strict", "relaxed"]
SandboxMode = Literal["auto", "bwrap", "none"]
ToolCallMode = Literal["native", "text", "auto"]
TuneStrategy = Literal["auto", "exhaustive", "tpe", "evolution"]
Allowable = Literal["gemm", "conv"]  # library families --allow may name
ShapeMode = Literal["off", "auto", "strict"]  # input sets at batch sizes the judge draws (--shapes)
# The built-in (no-LLM) policy's name: `--model builtin`, chat's `/model builtin`, `--start
# builtin`, and the model a report names when no LLM wrote the kernel.
BUILTIN = "builtin"
StartFrom = Literal["builtin"]

DEVICES: tuple[str, ...] = get_args(Device)
STAGES: tuple[str, ...] = get_args(Stage)
PRECISIONS: tuple[str, ...] = get_args(Precision)
SANDBOX_MODES: tuple[str, ...] = get_args(SandboxMode)
TOOL_CALL_MODES: tuple[str, ...] = get_args(ToolCallMode)
TUNE_STRATEGIES: tuple[str, ...] = get_args(TuneStrategy)
ALLOWABLE: tuple[str, ...] = get_args(Allowable)
SHAPE_MODES: tuple[str, ...] = get_args(ShapeMode)


def check_choice(what: str, value: object, choices: tuple[str, ...]) -> None:
    """ValueError naming the option, the choices and the bad value when `value` is not one."""
    if value not in choices:
        raise ValueError(f"{what} must be one of {', '.join(choices)}, not {value!r}")
