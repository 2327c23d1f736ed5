"""Where a candidate's process runs: a private folder, a scrubbed environment, bubblewrap
when available, and a record of every process it started so none outlives the evaluation.

- Environment: an allow-list (PATH, locale, CUDA/torch build variables, ...); no name that
  looks like a credential passes, HOME and TMPDIR point into the private folder.
- bwrap (`--sandbox auto|bwrap`): read-only root, a tmpfs over the real HOME (no ~/.ssh,
  ~/.aws) and over kcoder's cache (its shared build products bound back read-only), writable
  only the private folder and what the caller names (the candidate's private build folder),
  private /tmp, no network, its own PID namespace (every descendant dies with it), GPU device
  nodes for cuda.
- Every candidate process carries a marker variable; the judge finds them all through /proc
  (also after setsid or a double fork), sums their memory, stops and kills them.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kcoder.choices import SANDBOX_MODES, check_choice
from kcoder.paths import cache_root, package_root
from kcoder.procs import run
from kcoder.redact import is_secret_name

MARKER = "KCODER_EVAL_ID"
# The parts of kcoder's cache a sandbox may read (never write): what build/builder.py makes.
SHARED_PRODUCTS = ("build", "objects", "pch", "light")
# Variables a build or a CUDA program legitimately needs; anything else is dropped.
ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES",
             "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "TORCH_CUDA_ARCH_LIST", "LD_LIBRARY_PATH",
             "MAX_JOBS", "CC", "CXX", "NVCC_FLAGS", "KCODER_CACHE", "KCODER_PCH", "KCODER_LIGHT_HEADER",
             "OMP_NUM_THREADS", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONHASHSEED")


@dataclass
class Box:
    """One candidate's private folder: its copies of the files, HOME, TMPDIR, exchanged tensors."""

    root: Path
    marker: str = field(default_factory=lambda: secrets.token_hex(12))
    exchange: Path | None = None  # a folder in /dev/shm where outputs may travel
    use_exchange: bool = False  # whether they do (it has room for them)

    @classmethod
    def create(cls, parent: Path) -> Box:
        box = cls(parent / "box")
        for sub in ("home", "tmp", "io"):
            (box.root / sub).mkdir(parents=True, exist_ok=True)
        return box

    @property
    def io(self) -> Path:
        return self.root / "io"

    @property
    def outputs(self) -> Path:
        """Where the candidate's process saves its outputs for the reference process."""
        return self.exchange if self.exchange is not None and self.use_exchange else self.io


def scrubbed_env(box: Box, **extra: str) -> dict[str, str]:
    """The candidate's environment: the allow-list minus credentials, private HOME and TMPDIR,
    this kcoder importable, the marker that finds its processes."""
    env = {k: v for k, v in os.environ.items() if k in ENV_ALLOW and not is_secret_name(k)}
    env.update(HOME=str(box.root / "home"), TMPDIR=str(box.root / "tmp"), PYTHONUNBUFFERED="1",
               PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1", KCODER_CACHE=str(cache_root()),
               PYTHONPATH=str(package_root()), **{MARKER: box.marker})
    env.update(extra)
    return env


@functools.cache
def bwrap_usable() -> str | None:
    """Path of a bwrap that can build a sandbox here, or None (missing, or not permitted)."""
    path = shutil.which("bwrap")
    if not path:
        return None
    probe = run([path, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"], 30, Path("/"))
    return path if probe.rc == 0 else None


def resolve_mode(mode: str) -> tuple[str, str | None]:
    """('bwrap' | 'none', note): auto takes bwrap where it works; the note says what is missing."""
    check_choice("--sandbox", mode, SANDBOX_MODES)
    if mode == "none":
        return "none", "sandbox off (--sandbox none): the candidate ran with a scrubbed environment only"
    if bwrap_usable():
        return "bwrap", None
    why = "bwrap is not installed" if not shutil.which("bwrap") else "bwrap cannot create namespaces here"
    if mode == "bwrap":
        raise ValueError(f"--sandbox bwrap: {why} (Debian/Ubuntu: apt install bubblewrap)")
    return "none", (f"no sandbox: {why}; the candidate ran with a scrubbed environment, a private folder "
                    "and every descendant killed, but could read and write your files")


def require_sandbox(mode: str) -> None:
    """ValueError when `--sandbox bwrap` was asked for and bwrap cannot run here: the command
    stops before any step that runs code kcoder did not write (exit 2), never running it
    unconfined instead. "auto" falls back by design (the verdict says so); "none" asks for none."""
    if mode == "bwrap":
        resolve_mode(mode)


def _outermost(paths: list[Path]) -> list[Path]:
    """Drop paths that lie inside another path of the list."""
    result: list[Path] = []
    for p in sorted(set(paths), key=lambda q: len(q.parts)):
        if not any(p == r or r in p.parents for r in result):
            result.append(p)
    return result


def _runtime_paths() -> list[Path]:
    """What the worker needs to read: Python, its packages, this kcoder."""
    found = [Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path) if p]
    found.append(package_root())
    return [p.resolve() for p in found if p.exists()]


def bwrap_argv(box: Box, device: str, read_only: list[Path], writable: list[Path] | None = None) -> list[str]:
    """The bwrap prefix for a candidate command (see the module docstring); `read_only` are
    files and folders it may read but never change (its job, kcoder's hand-off folder),
    `writable` folders outside the box it may change (its private build folder)."""
    bwrap = bwrap_usable() or "bwrap"
    home = Path.home().resolve()
    argv = [bwrap, "--die-with-parent", "--new-session", "--unshare-all", "--ro-bind", "/", "/",
            "--dev", "/dev", "--tmpfs", "/dev/shm", "--proc", "/proc", "--tmpfs", "/tmp"]
    masked = [Path("/tmp").resolve()]
    if home != Path("/"):
        argv += ["--tmpfs", str(home)]  # hides ~/.ssh, ~/.aws, ~/.config ... of the real user
        masked.append(home)
    # Python, its packages and this kcoder stay visible (read-only) even when they live in a
    # masked folder (a virtual environment in /tmp, pyenv in HOME).
    hidden = [p for p in _runtime_paths() if any(m == p or m in p.parents for m in masked)]
    for path in _outermost(hidden):
        argv += ["--ro-bind", str(path), str(path)]
    if device == "cuda":
        for node in sorted(Path("/dev").glob("nvidia*")):
            argv += ["--dev-bind", str(node), str(node)]
    # kcoder's cache: hidden, but for the shared build products, read-only (only a trusted
    # builder writes them: build/requests.py); tune/, profile/, locks/, baselines/ and the
    # signing key are out of sight.
    cache = cache_root()
    cache.mkdir(parents=True, exist_ok=True)
    argv += ["--tmpfs", str(cache.resolve())]
    for name in SHARED_PRODUCTS:
        product = cache / name
        product.mkdir(exist_ok=True)
        argv += ["--ro-bind", str(product.resolve()), str(product.resolve())]
    writables = [box.root.resolve()] + ([box.exchange.resolve()] if box.exchange else [])
    writables += [p.resolve() for p in writable or []]
    for folder in writables:
        argv += ["--bind", str(folder), str(folder)]
    for path in read_only:
        argv += ["--ro-bind", str(path.resolve()), str(path.resolve())]
    return argv + ["--chdir", str(box.root)]


def confined_command(argv: list[str], box: Box, device: str, mode: str, read_only: list[Path] | None = None,
                     writable: list[Path] | None = None, **env: str) -> tuple[list[str], dict[str, str]]:
    """`argv` (a command that runs code kcoder did not write) and its environment as it runs in
    `box`: scrubbed environment (plus `env`), and bwrap when `mode` is bwrap, else the subreaper
    that collects every descendant. The caller ends the marked processes with `kill_all`."""
    if mode == "bwrap":
        return bwrap_argv(box, device, read_only or [], writable) + argv, scrubbed_env(box, **env)
    return [sys.executable, "-m", "kcoder.evaluate.reaper", *argv], scrubbed_env(box, **env)


def marked_pids(marker: str) -> list[int]:
    """Every live process whose environment carries `marker` (the candidate and its descendants)."""
    needle = f"{MARKER}={marker}".encode()
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as fh:
                if needle in fh.read():
                    pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def resident_bytes(pids: list[int]) -> int:
    """Sum of resident memory (VmRSS) of `pids`."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, ValueError):
            continue
    return total


def signal_all(marker: str, sig: int) -> int:
    """Send `sig` to every marked process; return how many there were."""
    pids = marked_pids(marker)
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    return len(pids)


def kill_all(marker: str, rounds: int = 20) -> None:
    """SIGKILL marked processes until none is left (a forking child cannot outrun this)."""
    for _ in range(rounds):
        if not signal_all(marker, signal.SIGKILL):
            return
