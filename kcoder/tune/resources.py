"""Compiler resources of one tuning point (cuda): registers and spill bytes from ptxas.

The profile package's `prepare` step finds the point's extension build directories (kcoder's
content-keyed ones, already built by the judge: the step only loads them) and
`profile.ptxas.compiler_reports` recompiles the CUDA unit with `-Xptxas -v`. The step imports
the point (code kcoder did not write), so it runs in the sandbox like every profile target
(profile/targetbox.py: scrubbed environment, bwrap when available), and with no GPU visible, so
it never competes with the point being timed on the device; the arch is passed in so it
resolves the same build directory the judge built.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

PREPARE_TIMEOUT_S = 300.0


def arch_list(arch: str) -> str:
    """TORCH_CUDA_ARCH_LIST for an arch name: "sm_90" -> "9.0" ("" when unknown)."""
    digits = arch.removeprefix("sm_")
    return f"{digits[:-1]}.{digits[-1]}" if len(digits) >= 2 and digits.isdigit() else ""


def point_resources(problem: Path, candidate: Path, arch: str, sandbox: str = "auto") -> dict[str, Any]:
    """{"registers": max over kernels, "spills": total spill bytes}; {} when unavailable
    (a failure here only leaves the table's columns empty)."""
    try:
        builds = _build_dirs(problem, candidate, arch, sandbox)
        if not builds:
            return {}
        from kcoder.profile.ptxas import compiler_reports

        report = compiler_reports(builds, PREPARE_TIMEOUT_S, arch or None, sandbox)
    except (OSError, ValueError, KeyError):
        return {}
    regs = [k.registers for k in report.kernels if k.registers is not None]
    spills = [(k.spill_store_bytes or 0) + (k.spill_load_bytes or 0) for k in report.kernels]
    if not regs:
        return {}
    return {"registers": max(regs), "spills": sum(spills)}


def _build_dirs(problem: Path, candidate: Path, arch: str, sandbox: str) -> list[Path]:
    from kcoder.profile.profiler import target_command
    from kcoder.profile.targetbox import TargetBox, build_dirs

    with tempfile.TemporaryDirectory(prefix="kcoder-tune-res-") as tmp:
        box = TargetBox.create(Path(tmp), problem, candidate, sandbox, device="cpu")  # no GPU device nodes
        job = box.write_job({"arch_list": arch_list(arch) or "9.0", "calibrate": False})
        out = box.root / "prepare.json"
        box.run(target_command("prepare", job, out), PREPARE_TIMEOUT_S, LC_ALL="C", CUDA_VISIBLE_DEVICES="")
        if not out.exists():
            return []
        prep = json.loads(out.read_text())
    return build_dirs(prep, ok_only=True)
