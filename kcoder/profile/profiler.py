"""`kcoder profile`: Nsight Compute per-kernel metrics, a measured roofline, and ptxas resources.

Flow (each step a subprocess in its own process group with a hard time limit; every step that
runs the candidate runs confined in its box, profile/targetbox.py, and the whole profile holds
the GPU's lock, devicelock.py):
1. prepare (profile_target.py): build the candidate with kcoder's build cache, note the GPU,
   run one forward, count the minimum bytes, measure the device's ceilings once (cached);
2. the compiler report (ptxas.py) starts in the background from the build directories;
3. ncu (ncu_run.py) profiles one forward inside the NVTX range "kcoder_candidate"
   (`--clock-control none`, so clocks are the ones the benchmark sees), writes a report, and
   two CSV pages are imported from it: raw (every metric, mangled names, base units) and
   details (rules), parsed by ncu_parse.py; roofline.py places each kernel;
4. when ncu is missing, lacks permission, times out or gives unusable counters, one line
   says so and torch.profiler's kernel timeline is used instead.
Profiling is not judging: a profile says nothing about correctness (use `kcoder eval`).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kcoder.device_limits import DeviceLimits, RooflinePoint, roofline
from kcoder.devicelock import DeviceTurn
from kcoder.procs import RunResult
from kcoder.profile.calibrate import calibrate
from kcoder.profile.ncu_parse import KernelMetrics
from kcoder.profile.ncu_run import find_ncu, run_ncu
from kcoder.profile.options import ProfileOptions
from kcoder.profile.ptxas import CompilerReport, KernelResources, compiler_reports, function_base
from kcoder.profile.targetbox import TargetBox, build_dirs
from kcoder.trust import read_plain


@dataclass
class ProfileReport:
    """Everything one profile produced; `mode` says which path: ncu, timeline (fallback),
    compiler-only (no GPU) or failed."""

    problem: str
    candidate: str
    mode: str = "failed"
    device_name: str = ""
    kernels: list[KernelMetrics] = field(default_factory=list)
    roofline: dict[int, RooflinePoint] = field(default_factory=dict)
    resources: dict[int, KernelResources] = field(default_factory=dict)  # launch id -> compiler entry
    timeline: list[dict[str, Any]] = field(default_factory=list)
    compiler: CompilerReport | None = None
    limits: DeviceLimits | None = None
    min_bytes: int | None = None
    messages: list[str] = field(default_factory=list)  # one line each: fallbacks, what is missing
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    error_log: str = ""
    exit_code: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    ncu_command: list[str] = field(default_factory=list)

    def kernel_time_ns(self) -> float | None:
        """Device time of one forward: summed ncu durations, else the timeline's sum."""
        if self.kernels:
            return sum(k.duration_ns or 0.0 for k in self.kernels) or None
        if self.timeline:
            return 1e3 * sum(t["us_per_forward"] for t in self.timeline) or None
        return None

    def to_dict(self, full: bool = False) -> dict[str, Any]:
        kernels = []
        for k in self.kernels:
            d = asdict(k)
            d.update(dram_bytes=k.dram_bytes, fp32_flops=k.fp32_flops, smem_per_block=k.smem_per_block,
                     stall_share=k.stall_share())
            if not full:
                d.pop("raw")
            point, res = self.roofline.get(k.id), self.resources.get(k.id)
            d["roofline"] = asdict(point) if point else None
            d["compiler"] = asdict(res) if res else None
            kernels.append(d)
        return {"problem": self.problem, "candidate": self.candidate, "mode": self.mode,
                "device_name": self.device_name, "kernels": kernels, "timeline": self.timeline,
                "compiler": self.compiler.to_dict() if self.compiler else None,
                "limits": asdict(self.limits) if self.limits else None, "min_bytes": self.min_bytes,
                "kernel_time_ns": self.kernel_time_ns(), "messages": self.messages, "notes": self.notes,
                "error": self.error, "error_log": self.error_log if full else self.error_log[-1500:],
                "exit_code": self.exit_code, "seconds": self.seconds, "ncu_command": self.ncu_command}


# --- the target process ---------------------------------------------------------------------
def target_command(mode: str, job: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "kcoder.profile.target", mode, str(job), str(out)]


def _run_target(mode: str, job: Path, box: TargetBox, timeout_s: float) -> tuple[dict[str, Any], RunResult]:
    """Run a profile_target mode in the box; the dict is its result, or {'error': ...} when it died."""
    out = box.root / f"{mode}.json"
    res = box.run(target_command(mode, job, out), timeout_s, LC_ALL="C")
    if out.exists() or out.is_symlink():
        return _read_json(out) or {"error": f"the {mode} step wrote an unreadable result", "stage": mode}, res
    if res.timed_out:
        return {"error": f"the {mode} step exceeded its {timeout_s:.0f} s limit and was killed", "stage": mode}, res
    tail = "\n".join(res.output.strip().splitlines()[-20:])
    return {"error": f"the {mode} step died (exit code {res.rc}) without a result", "stage": mode, "log": tail}, res


# --- the whole profile -------------------------------------------------------------------------
def match_resources(kernels: list[KernelMetrics], resources: list[KernelResources]) -> dict[int, KernelResources]:
    """Pair ncu launches with compiler entries: exact mangled name, else a unique bare name."""
    by_name = {r.name: r for r in resources}
    by_base: dict[str, list[KernelResources]] = {}
    for r in resources:
        by_base.setdefault(function_base(r.name), []).append(r)
    matched = {}
    for k in kernels:
        hit = by_name.get(k.mangled or "") or by_name.get(k.name)
        if hit is None:
            candidates = by_base.get(function_base(k.mangled or k.name), [])
            hit = candidates[0] if len(candidates) == 1 else None
        if hit is not None:
            matched[k.id] = hit
    return matched


def profile_candidate(problem_path: str | Path, candidate_path: str | Path,
                      options: ProfileOptions | None = None) -> ProfileReport:
    """Profile a candidate. Raises ProblemError for unusable files and ValueError for bad
    options; everything else (no GPU, build errors, ncu trouble) is in the report."""
    from kcoder.problem import check_candidate_file, load_problem

    options = options or ProfileOptions()
    options.validate()
    problem = load_problem(problem_path)
    candidate = Path(candidate_path).resolve()
    check_candidate_file(candidate)
    report = ProfileReport(problem=str(problem.path), candidate=str(candidate))
    started = time.monotonic()
    # the GPU's lock for the whole profile: prepare runs forwards, ncu replays kernels
    with tempfile.TemporaryDirectory(prefix="kcoder-profile-") as tmp_name, DeviceTurn("cuda", "profile"):
        box = TargetBox.create(Path(tmp_name), problem.path.resolve(), candidate, options.sandbox)
        report.notes += [box.note] if box.note else []
        job = box.write_job({"seed": options.seed, "precision": options.precision, "calibrate": options.calibrate})
        prep, res = _run_target("prepare", job, box, options.prepare_timeout_s)
        report.seconds["prepare"] = res.seconds
        report.notes += prep.get("notes", [])
        report.device_name = prep.get("device_name", "")
        builds = build_dirs(prep)
        cpu_torch = "torch_version" in prep and not prep.get("torch_cuda")
        with ThreadPoolExecutor(max_workers=1) as pool:
            # ptxas recompiles while ncu runs: both take tens of seconds, neither needs the other
            compiled = None if cpu_torch else pool.submit(compiler_reports, builds, options.ptxas_timeout_s,
                                                          prep.get("arch"), options.sandbox)
            _profile_steps(report, prep, job, box, options)
            report.compiler = compiled.result() if compiled else CompilerReport(
                error="torch here is a CPU-only build, so it cannot compile the CUDA sources")
    report.seconds["compiler"] = report.compiler.seconds
    report.resources = match_resources(report.kernels, report.compiler.kernels)
    report.seconds["total"] = round(time.monotonic() - started, 2)
    return report


def _profile_steps(report: ProfileReport, prep: dict[str, Any], job: Path, box: TargetBox,
                   options: ProfileOptions) -> None:
    if prep.get("gpu") is False:
        report.mode, report.exit_code = "compiler-only", 2
        why = ("torch sees none on this machine" if prep.get("torch_cuda") else
               f"torch {prep.get('torch_version', '?')} here is a CPU-only build")
        report.messages.append(f"kernel profiling needs a CUDA GPU: {why} (compiler report only)")
        if prep.get("error"):
            report.notes.append(f"the candidate did not build here: {prep['error']}")
        return
    if prep.get("error"):
        report.error, report.error_log = prep["error"], prep.get("log", "")
        report.exit_code = 2 if prep.get("stage") == "problem" else 1
        return
    if options.calibrate:  # in a process of kcoder's own: the target's report is the candidate's writing
        measured, note = calibrate(box.root.parent, options.prepare_timeout_s)
        report.limits = DeviceLimits(**measured["limits"]) if measured.get("limits") else None
        report.notes += [note] if note else []
    report.min_bytes = prep.get("min_bytes")
    ncu = find_ncu(options)
    if ncu is None:
        message = "ncu (Nsight Compute) not found on PATH, in $CUDA_HOME/bin or via --ncu/$KCODER_NCU"
    else:
        outcome = run_ncu(ncu, target_command("run", job, box.root / "run.json"), box.root, options, box.root,
                          confine=box.command)
        report.seconds["ncu"] = round(outcome.seconds, 2)
        report.ncu_command = outcome.command
        run_result = _read_json(box.root / "run.json")
        report.notes += outcome.notes
        if outcome.ok:
            report.mode, report.kernels = "ncu", outcome.kernels
            for k in report.kernels:
                if k.usable() and k.dram_bytes is not None:
                    point = roofline(k.dram_bytes, k.fp32_flops, k.duration_ns, report.limits)
                    if point:
                        report.roofline[k.id] = point
                if k.unusable:
                    report.notes.append(f"kernel #{k.id}: ncu gave n/a or NaN for {', '.join(k.unusable)}")
            _measure_alongside(report, job, box, options)
            return
        message = outcome.message or "ncu failed"
        if run_result.get("error"):
            message += f"; the candidate under ncu: {run_result['error']}"
    report.messages.append(f"{message} -> falling back to a torch.profiler kernel timeline")
    timeline, res = _run_target("timeline", job, box, options.timeline_timeout_s)
    report.seconds["timeline"] = res.seconds
    if timeline.get("error"):
        report.error, report.error_log = timeline["error"], timeline.get("log", "")
        report.exit_code = 1
        return
    report.mode, report.timeline = "timeline", timeline.get("timeline", [])


def _measure_alongside(report: ProfileReport, job: Path, box: TargetBox, options: ProfileOptions) -> None:
    """ncu's durations come from replays; the same forward's device time measured without the
    profiler (torch.profiler, L2 flushed) shows whether they describe the real run."""
    timeline, res = _run_target("timeline", job, box, options.timeline_timeout_s)
    report.seconds["measured"] = res.seconds
    if timeline.get("error"):
        report.notes.append(f"device time without ncu not measured: {timeline['error']}")
    else:
        report.timeline = timeline.get("timeline", [])


def _read_json(path: Path) -> dict[str, Any]:
    """A result the target wrote in its box: a regular file, no link followed."""
    try:
        data = json.loads(read_plain(path))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
