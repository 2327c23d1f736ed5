"""Parent side of an evaluation: static checks, then one worker subprocess with time limits.

kcoder itself never crashes or hangs because of a candidate: the worker runs in its own
process group; each stage (build, verify, timing) has its own deadline; a signal, abort or
silent exit becomes a verdict with the reason.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kcoder.evaluate.options import EvalOptions
from kcoder.evaluate.static import check_source
from kcoder.problem import check_candidate_file, load_problem
from kcoder.verdict import Verdict

_SIGNALS = {
    signal.SIGSEGV: "segmentation fault (SIGSEGV)",
    signal.SIGABRT: "abort (SIGABRT)",
    signal.SIGBUS: "bus error (SIGBUS)",
    signal.SIGFPE: "floating-point exception (SIGFPE)",
    signal.SIGILL: "illegal instruction (SIGILL)",
    signal.SIGKILL: "killed (SIGKILL, often out of memory)",
}


def evaluate(problem_path: str | Path, candidate_path: str | Path,
             options: EvalOptions | None = None) -> Verdict:
    """Evaluate a candidate file against a problem file. Raises ProblemError for bad input
    files and ValueError for bad options; every candidate failure is a Verdict."""
    options = options or EvalOptions()
    options.validate()
    problem = load_problem(problem_path)
    candidate_path = Path(candidate_path).resolve()
    source = check_candidate_file(candidate_path)
    verdict = Verdict(problem=str(problem.path), candidate=str(candidate_path), device=options.device,
                      precision=options.precision, allow=list(options.allow))
    findings = check_source(source, allow=options.allow, reference_stems={problem.name})
    if findings:
        verdict.fail("static", findings[0].describe(candidate_path.name),
                     "\n".join(f.describe(candidate_path.name) for f in findings))
        return verdict
    return _run_worker(problem.path, candidate_path, options, verdict)


def _limits(options: EvalOptions) -> dict[str, float]:
    return {"start": 120.0, "problem": 120.0, "build": options.build_timeout_s,
            "verify": options.verify_timeout_s, "timing": options.timing_timeout_s}


def _run_worker(problem: Path, candidate: Path, options: EvalOptions, verdict: Verdict) -> Verdict:
    with tempfile.TemporaryDirectory(prefix="kcoder-eval-") as tmp:
        job = Path(tmp) / "job.json"
        job.write_text(json.dumps({"problem": str(problem), "candidate": str(candidate),
                                   "options": options.to_dict()}))
        log_path = Path(tmp) / "output.log"
        read_fd, write_fd = os.pipe()
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PYTHONUNBUFFERED"] = "1"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "kcoder.evaluate.worker", str(job), str(write_fd)],
                pass_fds=(write_fd,), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env=env, cwd=str(candidate.parent))
            os.close(write_fd)
            try:
                result = _follow(proc, read_fd, _limits(options), verdict)
            finally:
                _kill_group(proc)
                os.close(read_fd)
        output = log_path.read_text(errors="replace")
    if result.get("final"):
        return Verdict.from_dict(result["verdict"])
    return _crash_verdict(result, proc.returncode, output)


def _follow(proc: subprocess.Popen, fd: int, limits: dict[str, float], verdict: Verdict) -> dict:
    """Read the worker's messages, enforcing the current stage's deadline."""
    state = {"phase": "start", "verdict": verdict.to_dict(), "final": False}
    deadline = time.monotonic() + limits["start"]
    buffer = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            state["timeout"] = limits.get(state["phase"], 0)
            return state
        ready, _, _ = select.select([fd], [], [], min(remaining, 1.0))
        if not ready:
            if proc.poll() is not None and not _has_data(fd):
                return state
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            proc.wait()
            return state
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            message = json.loads(line)
            if "verdict" in message:
                state["verdict"] = message["verdict"]
            if "phase" in message:
                state["phase"] = message["phase"]
                deadline = time.monotonic() + limits.get(message["phase"], 600.0)
            else:
                state["final"] = True
                return state


def _has_data(fd: int) -> bool:
    ready, _, _ = select.select([fd], [], [], 0)
    return bool(ready)


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the worker and everything it started (compilers, stray children)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _crash_verdict(state: dict, returncode: int | None, output: str) -> Verdict:
    verdict = Verdict.from_dict(state["verdict"])
    phase = state["phase"] if state["phase"] != "start" else "build"
    tail = "\n".join(output.strip().splitlines()[-25:])
    if "timeout" in state:
        return verdict.fail(phase, f"timeout: the {phase} stage exceeded its {state['timeout']:.0f} s "
                                   "limit; the worker was killed (infinite loop or hang?)", tail)
    where = _crash_location(output)
    if returncode is not None and returncode < 0:
        sig = -returncode
        name = _SIGNALS.get(sig) or _signal_name(sig)
        return verdict.fail(phase, f"crash during {phase}: {name}{where}", tail)
    return verdict.fail(phase, f"the worker exited with code {returncode} during {phase}{where} "
                               "without a verdict", tail)


def _signal_name(sig: int) -> str:
    try:
        return f"signal {signal.Signals(sig).name}"
    except ValueError:
        return f"signal {sig}"


def _crash_location(output: str) -> str:
    """faulthandler prints 'File "...", line N in fn' frames; name the candidate's, if any."""
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("File ") and "kcoder/evaluate" not in line and "site-packages" not in line:
            return f" ({line})"
    return ""
