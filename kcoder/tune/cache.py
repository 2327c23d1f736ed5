"""Tuning results kept per kernel and machine, so tuning the same kernel again is instant.

A point's measurement depends on the kernel's source (not on the space or the current
choice: those literals are cut out of the key), the problem (its shapes), the device (name
and arch, or the CPU model and core count), the torch and CUDA versions and the precision
policy. Another GPU, another torch or another problem is another file and so a fresh tuning.
Entries are JSON under $KCODER_CACHE/tune/, signed (kcoder/trust.py): a point is taken back
as a verdict, so an entry whose MAC is not kcoder's (damaged, or written by anything else) is
ignored and rewritten. The sandbox never mounts tune/.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
from pathlib import Path
from typing import Any

from kcoder.hostinfo import gpu_identity, torch_version_field
from kcoder.paths import cache_root
from kcoder.trust import read_plain, replace_file, signed, verified

FORMAT = 1


def device_identity(device: str) -> dict[str, str]:
    """What makes timings of one machine comparable: device name and arch, torch, CUDA.
    Read without importing torch or touching the GPU (the judge's processes own it)."""
    ident = {"device": device, "torch": _dist_version("torch"), "cuda": torch_version_field("cuda", "none")}
    if device == "cuda":
        ident.update(gpu_identity())
    else:
        ident.update(name=_cpu_model(), cores=str(len(os.sched_getaffinity(0))))
    return ident


def _dist_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return ""


def _cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return os.uname().machine
    m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    return m.group(1).strip() if m else os.uname().machine


class TuneCache:
    """The stored points of one (kernel, problem, device, versions, policy) key."""

    def __init__(self, kernel_key: str, problem: Path, identity: dict[str, str], policy: dict[str, Any]) -> None:
        material = json.dumps({"format": FORMAT, "kernel": kernel_key, "problem": _file_hash(problem),
                               "identity": identity, "policy": policy}, sort_keys=True)
        self.key = hashlib.sha256(material.encode()).hexdigest()[:24]
        self.path = cache_root() / "tune" / f"{self.key}.json"
        self.identity = identity
        self.data: dict[str, Any] = {"identity": identity, "points": {}, "final": {}}
        self._load()

    def _load(self) -> None:
        try:
            data = verified(json.loads(read_plain(self.path)))
        except (OSError, ValueError):
            return
        if isinstance(data, dict) and isinstance(data.get("points"), dict):
            self.data.update(points=data["points"], final=data.get("final") or {})

    def point(self, key: str) -> dict[str, Any] | None:
        return self.data["points"].get(key)

    def final(self, key: str) -> dict[str, Any] | None:
        return self.data["final"].get(key)

    def store_point(self, key: str, record: dict[str, Any]) -> None:
        self.data["points"][key] = record
        self._save()

    def store_final(self, key: str, record: dict[str, Any]) -> None:
        self.data["final"][key] = record
        self._save()

    def _save(self) -> None:
        # written whole after every point: an interrupted tuning keeps what it measured
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = json.loads(json.dumps(self.data, default=str))  # the MAC covers what is written
        replace_file(self.path, json.dumps(signed(data), indent=1).encode())


def _file_hash(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""
