"""The device by name, as verdicts, reports and commit messages state it: "NVIDIA H200, sm_90"
or the CPU's model ("AMD EPYC 7B13"), never only the architecture ("x86_64").

A process that must not import torch or touch the GPU (the judge's processes own it: the suite,
the tuner, the results log) asks nvidia-smi for the GPU and reads torch/version.py for torch."""

from __future__ import annotations

import importlib.util
import os
import platform
import re
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


def gpu_identity(index: str | None = None) -> dict[str, str]:
    """A GPU's name and arch (sm_90) from nvidia-smi (`index`: nvidia-smi -i, an index or a
    UUID; else the first GPU); empty values when unknown."""
    from kcoder.procs import run

    try:
        res = run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader",
                   *(["-i", index] if index is not None else [])], 30.0, Path.cwd())
    except OSError:
        return {"name": "", "arch": ""}
    line = res.output.strip().splitlines()[0] if res.rc == 0 and res.output.strip() else ""
    name, _, cap = line.partition(",")
    arch = "sm_" + cap.strip().replace(".", "") if cap.strip() else ""
    return {"name": name.strip(), "arch": arch}


def visible_cuda_device() -> str:
    """The GPU a judge of this process's environment runs on (CUDA_VISIBLE_DEVICES' first, else
    GPU 0) named as cuda_device names it, without torch; "" when unknown (no GPU or nvidia-smi,
    a MIG slice). On a host of mixed cards CUDA numbers them fastest first and nvidia-smi by
    PCI bus unless CUDA_DEVICE_ORDER=PCI_BUS_ID: there, pin the GPU with CUDA_VISIBLE_DEVICES."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    first = visible.split(",")[0].strip() if visible is not None else "0"
    gpu = gpu_identity(first) if first else {"name": "", "arch": ""}
    return f"{gpu['name']}, {gpu['arch']}" if gpu["name"] and gpu["arch"] else ""


def torch_version_field(name: str, missing: str = "") -> str:
    """A string of torch/version.py (`__version__` is torch.__version__, `cuda` torch.version.cuda)
    read from the file, as importing torch takes seconds; `missing` when the file does not set it
    to a string (cuda of a CPU build), "" when there is no torch."""
    spec = importlib.util.find_spec("torch")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "version.py"
        if path.exists():
            m = re.search(rf"^{re.escape(name)}\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", path.read_text(), re.M)
            return m.group(1) if m else missing
    return ""
