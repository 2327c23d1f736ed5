"""Compiler resources of one tuning point (cuda): registers and spill bytes from ptxas.

The profile package's `prepare` step finds the point's extension build directories (kcoder's
content-keyed ones, already built by the judge: the step only loads them) and
`profile.ptxas.compiler_reports` recompiles the CUDA unit with `-Xptxas -v`. The step runs
with no GPU visible, so it never competes with the point being timed on the device; the
arch is passed in so it resolves the same build directory the judge built.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

PREPARE_TIMEOUT_S = 300.0


def point_resources(problem: Path, candidate: Path, arch: str) -> dict[str, Any]:
    """{"registers": max over kernels, "spills": total spill bytes}; {} when unavailable
    (a failure here only leaves the table's columns empty)."""
    try:
        builds = _build_dirs(problem, candidate, arch)
        if not builds:
            return {}
        from kcoder.profile.ptxas import compiler_reports

        report = compiler_reports(builds, PREPARE_TIMEOUT_S, arch or None)
    except (OSError, ValueError, KeyError):
        return {}
    regs = [k.registers for k in report.kernels if k.registers is not None]
    spills = [(k.spill_store_bytes or 0) + (k.spill_load_bytes or 0) for k in report.kernels]
    if not regs:
        return {}
    return {"registers": max(regs), "spills": sum(spills)}


def _build_dirs(problem: Path, candidate: Path, arch: str) -> list[Path]:
    from kcoder.procs import child_env, run
    from kcoder.profile.profiler import target_command

    digits = arch.removeprefix("sm_")
    arch_list = f"{digits[:-1]}.{digits[-1]}" if len(digits) >= 2 else "9.0"
    with tempfile.TemporaryDirectory(prefix="kcoder-tune-res-") as tmp:
        job, out = Path(tmp) / "job.json", Path(tmp) / "prepare.json"
        job.write_text(json.dumps({"problem": str(problem), "candidate": str(candidate), "arch_list": arch_list,
                                   "calibrate": False}))
        env = child_env(LC_ALL="C", CUDA_VISIBLE_DEVICES="")
        run(target_command("prepare", job, out), PREPARE_TIMEOUT_S, candidate.parent, env)
        if not out.exists():
            return []
        prep = json.loads(out.read_text())
    return [Path(b["dir"]) for b in prep.get("builds", []) if b.get("cuda") and b.get("dir") and b.get("ok")]
