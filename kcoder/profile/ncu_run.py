"""Running Nsight Compute under hard time limits and reading its two CSV pages back.

`run_ncu` profiles a target command once (`-o REPORT`), then exports the report's raw page
(every metric, mangled names, base units) and details page (rules, demangled names). Each
ncu invocation runs in its own session and is SIGKILLed as a group at its time limit, so a
hanging ncu or profiled process never hangs kcoder. Failures come back as one line.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kcoder.procs import RunResult, child_env, run
from kcoder.profile.ncu_parse import KernelMetrics, NcuParseError, parse_ncu
from kcoder.profile.options import ProfileOptions
from kcoder.trust import open_plain

SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "Occupancy", "LaunchStats", "WarpStateStats")
FULL_SECTIONS = ("MemoryWorkloadAnalysis_Tables", "ComputeWorkloadAnalysis", "SchedulerStats")
METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
           "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum", "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum")
NVTX_INCLUDE = "kcoder_candidate/"
PERMISSION_HELP = ("ncu lacks permission to read GPU performance counters (ERR_NVGPUCTRPERM): run as root, or "
                   "load the driver with NVreg_RestrictProfilingToAdminUsers=0 "
                   "(https://developer.nvidia.com/ERR_NVGPUCTRPERM)")
Confine = Callable[..., tuple[list[str], dict[str, str]]]  # (argv, **env) -> argv, env in a sandbox


def env_for_targets() -> dict[str, str]:
    """The environment of ncu and the target: this checkout importable, C locale numbers."""
    return child_env(LC_ALL="C")  # ncu formats numbers by locale; "1.234,5" would not parse


# --- ncu ---------------------------------------------------------------------------------------
def find_ncu(options: ProfileOptions) -> str | None:
    """The ncu binary: --ncu / $KCODER_NCU, PATH, then the usual toolkit locations."""
    explicit = options.ncu or os.environ.get("KCODER_NCU")
    if explicit:
        return explicit if Path(explicit).exists() else None
    found = shutil.which("ncu")
    if found:
        return found
    homes = [os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
    for home in filter(None, homes):
        if (Path(home) / "bin" / "ncu").exists():
            return str(Path(home) / "bin" / "ncu")
    return None


def ncu_profile_command(ncu: str, rep_base: Path, target: list[str], full: bool = False) -> list[str]:
    sections = [a for s in SECTIONS + (FULL_SECTIONS if full else ()) for a in ("--section", s)]
    return [ncu, "--clock-control", "none", "--nvtx", "--nvtx-include", NVTX_INCLUDE, "--target-processes", "all",
            *sections, "--metrics", ",".join(METRICS), "-f", "-o", str(rep_base), *target]


def ncu_errors(res: RunResult) -> list[str]:
    return [ln.strip()[:240] for ln in res.output.splitlines() if ln.startswith("==ERROR==")]


def ncu_failure(res: RunResult, limit_s: float, report_written: bool = False) -> str | None:
    """One line saying why an ncu run is unusable, or None when it looks fine. Other errors
    with a report written (e.g. one kernel failed to replay) leave the rest usable."""
    if res.timed_out:
        return f"ncu exceeded its {limit_s:.0f} s limit and was killed with its target"
    if "ERR_NVGPUCTRPERM" in res.output:
        return PERMISSION_HELP
    if "No kernels were profiled" in res.output:
        return f"ncu profiled no kernel inside NVTX range {NVTX_INCLUDE!r} (does forward launch CUDA kernels?)"
    if report_written:
        return None
    errors = ncu_errors(res)
    if errors:
        return f"ncu failed: {errors[0]}"
    tail = [ln for ln in res.output.strip().splitlines() if ln.strip()][-1:] or ["no output"]
    if res.rc != 0:
        return f"ncu exited with code {res.rc}: {tail[0][:240]}"
    return f"ncu wrote no report ({tail[0][:200]})"


@dataclass
class NcuOutcome:
    ok: bool
    message: str | None = None
    kernels: list[KernelMetrics] = field(default_factory=list)
    seconds: float = 0.0
    command: list[str] = field(default_factory=list)
    raw_csv: str = ""
    details_csv: str = ""
    notes: list[str] = field(default_factory=list)


def _import_page(ncu: str, rep: Path, page: str, timeout_s: float, cwd: Path, env: dict[str, str]) -> RunResult:
    # raw: mangled names match ptxas entries exactly; details: demangled names for people
    extra = ["--print-units", "base", "--print-kernel-base", "mangled" if page == "raw" else "demangled"]
    res = run([ncu, "--import", str(rep), "--csv", "--page", page, *extra], timeout_s, cwd, env, tail_bytes=None)
    if res.rc != 0 and not res.timed_out:  # an older ncu may not know a print option: plain export
        res = run([ncu, "--import", str(rep), "--csv", "--page", page], timeout_s, cwd, env, tail_bytes=None)
    return res


def _save(prefix: str, rep: Path, pages: dict[str, str]) -> None:
    """Keep the report and both CSV pages (PREFIX.ncu-rep, PREFIX_raw.csv, PREFIX_details.csv)."""
    base = Path(prefix)
    base.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(rep, base.parent / f"{base.name}.ncu-rep")
    for page, text in pages.items():
        (base.parent / f"{base.name}_{page}.csv").write_text(text)


def _private_copy(report: Path, folder: Path) -> Path:
    """A copy of `report` in `folder`, read as a regular file without following a link."""
    copy = folder / report.name
    with open_plain(report) as src, open(copy, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return copy


def run_ncu(ncu: str, target: list[str], tmp: Path, options: ProfileOptions, cwd: Path,
            confine: Confine | None = None) -> NcuOutcome:
    """Profile the target under ncu, import the raw and details pages, parse them. `confine`
    gives the profiling command (ncu with its target) as it runs in the target's box; `tmp`
    must then be a folder the box may write (the report goes there)."""
    env = env_for_targets()
    rep_base = tmp / "profile"
    cmd = ncu_profile_command(ncu, rep_base, target, options.full)
    install = (Path(ncu).resolve().parent,)  # visible in the sandbox wherever ncu is installed
    full, run_env = confine(cmd, install, LC_ALL="C") if confine is not None else (cmd, env)
    res = run(full, options.ncu_timeout_s, cwd, run_env)
    outcome = NcuOutcome(ok=False, seconds=res.seconds, command=cmd)
    written = rep_base.with_suffix(".ncu-rep")
    outcome.message = ncu_failure(res, options.ncu_timeout_s, report_written=written.exists())
    if outcome.message:
        return outcome
    outcome.notes = [f"ncu reported: {e}" for e in ncu_errors(res)[:3]]
    # The box is the target's to write: ncu's import and the saved copy read kcoder's own copy.
    with tempfile.TemporaryDirectory(prefix="kcoder-ncu-") as private:
        try:
            rep = _private_copy(written, Path(private))
        except OSError as exc:
            outcome.message = f"ncu's report could not be read: {exc}"
            return outcome
        pages = {}
        for page in ("raw", "details"):
            r = _import_page(ncu, rep, page, options.import_timeout_s, cwd, env)
            outcome.seconds += r.seconds
            pages[page] = r.output if r.rc == 0 else ""
        outcome.raw_csv, outcome.details_csv = pages["raw"], pages["details"]
        if options.save_prefix:
            _save(options.save_prefix, rep, pages)
    try:
        kernels = parse_ncu(pages["raw"] or None, pages["details"] or None)
    except NcuParseError as exc:
        outcome.message = f"ncu's CSV export could not be read: {exc}"
        return outcome
    if not kernels:
        outcome.message = "ncu's export lists no kernel"
        return outcome
    if not any(k.usable() for k in kernels):
        fields = sorted({u for k in kernels for u in k.unusable}) or ["duration"]
        outcome.message = f"ncu returned unusable counters (n/a or NaN: {', '.join(fields)})"
        return outcome
    outcome.ok, outcome.kernels = True, kernels
    return outcome


