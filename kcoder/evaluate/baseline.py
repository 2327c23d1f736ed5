"""The reference alone: its baselines (eager, torch.compile) and its speed of light, measured
by the reference process without any candidate (optimize's roofline preflight).

The same process, the same timing rounds and the same SOL figures as a full evaluation's, so
the preflight's figures are those its verdicts will show.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kcoder.evaluate import basecache
from kcoder.evaluate.harness.channel import ChannelError
from kcoder.evaluate.options import EvalOptions
from kcoder.evaluate.sandbox import resolve_mode
from kcoder.evaluate.spawn import Children
from kcoder.problem import ProblemError, load_problem


class BaselineError(Exception):
    """kcoder could not measure the reference (its own failure, not the problem file's)."""


@dataclass
class ReferenceFigures:
    """A problem's baselines and speed of light on this device."""

    device_name: str
    eager_us: float
    compile_us: float | None
    sol_us: float | None
    sol_bound: str = ""
    sol_ceilings: str = ""
    flops: float | None = None
    min_bytes: int | None = None
    seconds: float = 0.0

    @property
    def compile_headroom(self) -> float | None:
        """How many times faster than torch.compile the SOL allows (the best speed-up any
        kernel could show over it), or None when either is unknown."""
        if not self.sol_us or not self.compile_us:
            return None
        return self.compile_us / self.sol_us

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "compile_headroom": self.compile_headroom}


def measure_reference(problem_path: str | Path, options: EvalOptions) -> ReferenceFigures:
    """Time the baselines and measure the SOL of a problem. ProblemError for a problem file
    that fails; BaselineError for kcoder's own failure."""
    options.validate()
    problem = load_problem(problem_path)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kcoder-baseline-") as work:
        # the sandbox mode only matters for a confined problem (the reference runs no candidate)
        mode = resolve_mode(options.sandbox)[0] if options.confine_problem else "none"
        children = Children(problem.path, None, options, Path(work), mode)
        try:
            ref = children.start_reference()
            info = _ask(ref, options.problem_timeout_s, problem.path, None)
            samples, calibration = _time_baselines(children, ref, problem.path, options, _batch_bytes(info, options))
            # after the baselines, as in the judge: a node's first ceiling measurement (GiB
            # copies, matmuls) must not run right before a baseline is timed
            sol = _ask(ref, options.problem_timeout_s, problem.path, {"op": "sol"})
            sol["calibration"] = calibration.to_list()  # a verdict's batches are taken off by it
        finally:
            children.close()
    if "sol_error" not in sol:  # the run's first verdicts reuse them (basecache.py)
        key = basecache.baseline_key(problem.sha256, str(info.get("device_name", "")),
                                     str(info.get("torch_version", "")), options)
        basecache.save_baselines(key, samples, sol)
    return ReferenceFigures(
        device_name=str(info.get("device_name", "")), eager_us=statistics.median(samples["eager"]),
        compile_us=statistics.median(samples["compile"]) if "compile" in samples else None,
        sol_us=sol.get("sol_us"), sol_bound=str(sol.get("sol_bound", "")),
        sol_ceilings=str(sol.get("sol_ceilings", sol.get("sol_error", ""))), flops=sol.get("flops"),
        min_bytes=sol.get("min_bytes"), seconds=round(time.perf_counter() - started, 1))


def _batch_bytes(info: dict[str, Any], options: EvalOptions) -> int:
    """What a batch keeps per call, as the judge sizes its batches (judge.py: output_bytes on the
    GPU; on the cpu an arena's call, its inputs and output)."""
    out_mb = info.get("output_mb") if isinstance(info.get("output_mb"), (int, float)) else 0.0
    footprint_mb = info.get("footprint_mb") if isinstance(info.get("footprint_mb"), (int, float)) else 0.0
    mb = out_mb if options.device == "cuda" else max(footprint_mb - out_mb, out_mb)
    return int(mb * 2**20) + 1


def _time_baselines(children: Any, ref: Any, problem: Path, options: EvalOptions,
                    batch_bytes: int) -> tuple[dict[str, list[float]], Any]:
    """Eager and torch.compile by the judge's clock, as a verdict times them (judgetiming.py)."""
    from kcoder.evaluate.judgeclock import SAMPLES, Endpoint
    from kcoder.evaluate.judgetiming import baseline_figures, gate_page

    def fail(exc: ChannelError) -> None:
        raise BaselineError(f"the reference process failed while timed ({exc.kind}: {exc})")

    def expect(reply: dict[str, Any], key: str) -> dict[str, Any]:
        if key not in _checked(reply, problem):
            raise BaselineError("the reference process failed: an unexpected reply")
        return reply

    cuda = options.device == "cuda"
    ask = lambda **request: _ask(ref, options.problem_timeout_s, problem, request)  # noqa: E731
    page = gate_page({}, ref, children.ref_share, ask) if cuda else None
    deadline = time.monotonic() + options.timing_timeout_s
    try:
        return baseline_figures(Endpoint(ref, fail, expect, page), cuda, deadline, SAMPLES, options.timing_budget_s,
                                options.compile_baseline, output_bytes=batch_bytes, share=children.ref_share)
    finally:
        if page is not None:
            page.close()


def _ask(ref: Any, limit_s: float, problem: Path, request: dict[str, Any] | None) -> dict[str, Any]:
    """One request to the reference process (its start-up reply when `request` is None)."""
    try:
        reply = ref.request(limit_s, **request) if request else ref.receive(limit_s)
    except ChannelError as exc:
        raise BaselineError(f"the reference process failed ({exc.kind}: {exc})") from None
    return _checked(reply, problem)


def _checked(reply: dict[str, Any], problem: Path) -> dict[str, Any]:
    """A reply of the reference process's: its problem's failure is ProblemError, kcoder's BaselineError."""
    if "problem" in reply:
        raise ProblemError(f"{problem}: {reply['problem']}")
    if "error" in reply:
        raise BaselineError(f"the reference process failed: {reply['error']}")
    return reply
