"""The device by name, as verdicts, reports and commit messages state it: "NVIDIA H200, sm_90"
or the CPU's model ("AMD EPYC 7B13"), never only the architecture ("x86_64")."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name (Linux /proc/cpuinfo; elsewhere what platform knows)."""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, sep, value = line.partition(":")
            # x86 says "model name"; some ARM kernels only "Model" or "Hardware"
            if sep and key.strip() in ("model name", "Model", "Hardware") and value.strip():
                return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def cuda_device(torch: Any, index: int = 0) -> str:
    """A CUDA device's name and compute capability, e.g. "NVIDIA H200, sm_90"."""
    major, minor = torch.cuda.get_device_capability(index)
    return f"{torch.cuda.get_device_name(index)}, sm_{major}{minor}"
