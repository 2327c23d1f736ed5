"""Roofline preflight: before the first turn, measure the reference's baselines and its speed
of light (evaluate/baseline.py) and say plainly when the target is out of physical reach.

Any brain (an LLM's agent or the built-in policy) calls `roofline_preflight` once, right
after its run directory exists; the figures are kept in the run directory (preflight.json, Workspace.preflight)
for the system prompt (prompts.sol_note) and the report. When torch.compile already runs so
close to the SOL that no kernel could be `target` times faster than it, the run stops with
that reason (exit 1) unless --keep-going.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kcoder import ui
from kcoder.settings import Settings
from kcoder.workspace import Workspace

OUT_OF_REACH = "out_of_reach"


@dataclass
class Preflight:
    """What the preflight found: the figures (None when skipped or failed) and whether the
    target is beyond what the speed of light allows."""

    figures: dict[str, Any] | None
    out_of_reach: bool = False
    message: str = ""


def roofline_preflight(ws: Workspace, settings: Settings, out: ui.Output) -> Preflight:
    """Measure (or, on --resume, reread) the baselines and the SOL and judge the target.
    Raises ProblemError when the problem file fails in the reference process."""
    if not settings.preflight:
        return Preflight(None)
    figures = ws.preflight()
    if figures is None:
        figures = _measure(ws, settings, out)
        if figures is None:
            return Preflight(None)
        ws.save_preflight(figures)
    out.note(describe(figures))
    headroom = figures.get("compile_headroom")
    if headroom is None or headroom >= settings.target:
        return Preflight(figures)
    message = (f"the target is out of reach: torch.compile takes {figures['compile_us']:,.1f} us and the speed "
               f"of light is {figures['sol_us']:,.1f} us ({figures['sol_bound']}-bound), so "
               f"{_room(headroom)}; the target is {settings.target:.2f}x")
    if settings.keep_going:
        out.warn(f"{message} (going on: --keep-going)")
        return Preflight(figures)
    return Preflight(figures, out_of_reach=True, message=message)


def _measure(ws: Workspace, settings: Settings, out: ui.Output) -> dict[str, Any] | None:
    """The reference's figures, or None (with a warning) when kcoder could not measure them."""
    from kcoder.evaluate.baseline import BaselineError, measure_reference

    options = replace(settings.eval_options(), stop_after="timing")
    try:
        with out.status("measuring the baselines and the speed of light"):
            return measure_reference(ws.reference, options).to_dict()
    except BaselineError as exc:
        out.warn(f"no roofline preflight: {exc}")
        return None


def describe(figures: dict[str, Any]) -> str:
    """One line: baselines, SOL and the room it leaves over torch.compile."""
    compile_us = figures.get("compile_us")
    text = f"reference: eager {figures['eager_us']:,.1f} us"
    text += f", torch.compile {compile_us:,.1f} us" if compile_us else ""
    if figures.get("sol_us"):
        text += (f"; speed of light {figures['sol_us']:,.1f} us ({figures['sol_bound']}-bound, "
                 f"{figures['sol_ceilings']})")
    if figures.get("compile_headroom"):
        text += f"; {_room(figures['compile_headroom'])}"
    return text


def _room(headroom: float) -> str:
    """What the SOL leaves over torch.compile, in words. The SOL is a lower bound on time (the
    faster of the device's copy ceiling and one at the problem's own size), so torch.compile
    at or past it is at the hardware limit (up to the bound's measurement noise)."""
    if headroom <= 1.0:
        return "torch.compile is at the hardware limit (no kernel can be faster than it)"
    return f"no kernel can be more than {headroom:.2f}x faster than torch.compile"


def stop_report(ws: Workspace, settings: Settings, out: ui.Output, pre: Preflight, profile: str) -> int:
    """End a run the preflight stopped: its report (status out_of_reach, the reason) and 1."""
    from kcoder.agent.loop import RunResult
    from kcoder.agent.report import build_report, print_summary
    from kcoder.replies import Usage

    result = RunResult(status=OUT_OF_REACH, message=pre.message, turns=0, best=None, target_reached=False,
                       usage=Usage(), seconds=float((pre.figures or {}).get("seconds", 0.0)))
    report = build_report(ws, result, model=settings.model or "", profile=profile, device=settings.device,
                          target=settings.target)
    ws.write_report(report)
    out.error(f"{pre.message}. Nothing was tried (pass --keep-going to try anyway).")
    print_summary(out, report)
    return 1
