"""`evaluate()`: static checks, then the judge with its two child processes, then a verdict
that is bounded in size and free of secrets.

kcoder itself never crashes or hangs because of a candidate: every child runs in its own
process group with deadlines per phase; a signal, abort, hang or malformed reply becomes a
verdict with the reason, and a failure of kcoder's own steps becomes an evaluation error
(status "error", reward 0) instead of a charge against the candidate.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Protocol

from kcoder.devicelock import trace_event
from kcoder.evaluate.harness.loading import LOG_CHARS, REASON_CHARS
from kcoder.evaluate.judge import Judge
from kcoder.evaluate.options import EvalOptions
from kcoder.evaluate.sandbox import resolve_mode
from kcoder.evaluate.spawn import Children
from kcoder.evaluate.static import check_source
from kcoder.problem import ProblemError, check_candidate_file, load_problem
from kcoder.redact import redact_data
from kcoder.verdict import Verdict

MAX_NOTES = 40


class Session(Protocol):
    """What `evaluate` asks of a session (session.EvalSession): judge one more candidate."""

    def judge(self, candidate: Path, options: EvalOptions, verdict: Verdict, mode: str) -> None: ...


def evaluate(problem_path: str | Path, candidate_path: str | Path,
             options: EvalOptions | None = None, session: Session | None = None) -> Verdict:
    """Evaluate a candidate file against a problem file. Raises ProblemError for a bad problem
    file (or a missing candidate file) and ValueError for bad options; every failure of the
    candidate is a Verdict. `session` (session.py, for `problem_path`'s problem): its reference
    process, kept from an earlier candidate, judges this one too."""
    started = time.perf_counter()
    options = options or EvalOptions()
    options.validate()
    problem = load_problem(problem_path)
    candidate_path = Path(candidate_path).resolve()
    verdict = Verdict(problem=str(problem.path), candidate=str(candidate_path), device=options.device,
                      precision=options.precision, allow=list(options.allow))
    source = _candidate_source(candidate_path, verdict)
    if source is None:
        return finish(verdict)
    findings = []
    if options.static_checks:
        findings = check_source(source, allow=options.allow, reference_stems={problem.name})
    if findings:
        verdict.fail("static", findings[0].describe(candidate_path.name),
                     "\n".join(f.describe(candidate_path.name) for f in findings))
        return finish(verdict)
    mode, note = resolve_mode(options.sandbox)
    verdict.sandbox = mode
    if note:
        verdict.notes.append(note)
    if session is not None:
        session.judge(candidate_path, options, verdict, mode)
    else:
        judge_alone(problem.path, candidate_path, options, verdict, mode)
    verdict.seconds["total"] = round(time.perf_counter() - started, 3)
    return finish(verdict)


def judge_alone(problem: Path, candidate: Path, options: EvalOptions, verdict: Verdict, mode: str) -> None:
    """The judge's stages with processes of this evaluation's own, all ended after."""
    with tempfile.TemporaryDirectory(prefix="kcoder-eval-") as work:
        children = Children(problem, candidate, options, Path(work), mode)
        try:
            run_judge(problem, candidate, options, verdict, children)
        finally:
            children.close()  # gives the device back


def run_judge(problem: Path, candidate: Path, options: EvalOptions, verdict: Verdict, children: Children) -> None:
    """The judge's stages for one candidate with `children` (its processes stopped after)."""
    Judge(problem, candidate, options, verdict, children).run()
    _trace_timing(verdict, children)


def _trace_timing(verdict: Verdict, children: Children) -> None:
    """For $KCODER_DEVICE_TRACE: when this evaluation timed (timing is its last stage, just
    ended) and whether it held the device's lock throughout."""
    seconds = verdict.seconds.get("timing")
    if seconds is not None:
        end = time.time()
        trace_event("timing", start=end - seconds, end=end, held=children.turn.held, what=verdict.candidate)


def _candidate_source(path: Path, verdict: Verdict) -> str | None:
    """The candidate's source; a file that is there but unusable is the candidate's failure."""
    if not path.is_file():
        raise ProblemError(f"{path}: no such file (expected a candidate file defining ModelNew).")
    try:
        return check_candidate_file(path)
    except ProblemError as exc:
        verdict.fail("static", str(exc))
        return None


def finish(verdict: Verdict) -> Verdict:
    """Settle the status, cap every text a candidate can make kcoder store, redact secrets."""
    if verdict.status != "error":
        built_only = verdict.compiled and verdict.stage == "build" and verdict.reason == "compiled"
        verdict.status = "accepted" if verdict.correct else "compiled" if built_only else "rejected"
    data = redact_data(verdict.to_dict())
    data["reason"] = _cap(data["reason"], REASON_CHARS)
    data["log"] = _cap(data["log"], LOG_CHARS, keep_end=True)
    data["notes"] = [_cap(n, REASON_CHARS) for n in data["notes"][:MAX_NOTES]]
    return Verdict.from_dict(data)


def _cap(text: str, limit: int, keep_end: bool = False) -> str:
    if len(text) <= limit:
        return text
    return "..." + text[-(limit - 3):] if keep_end else text[: limit - 3] + "..."
