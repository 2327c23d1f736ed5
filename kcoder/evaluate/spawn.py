"""Starting and ending an evaluation's two child processes.

The reference process runs the user's problem with kcoder's environment minus credentials;
a problem named by someone other than the user (an MCP client: `confine_problem`) runs in a
box of its own as the candidate does. The candidate's process runs in its private box
(sandbox.py): copies of the candidate and problem files, a scrubbed environment, bwrap when
available, a host-memory watchdog, and every process it started killed when it ends.

Both processes run work on the device, so the evaluation holds the device's lock
(devicelock.py) until `close`: on cuda from the reference process's start (the candidate's
process, started first, compiles meanwhile: host work; ModelNew is built on the device only
after the judge's "init", which comes later), on cpu from the candidate's start (compiling
shares the cores being timed). A compile-only evaluation (`stop_after="compile"`, tune's
build-ahead) starts no reference process, and on cuda its candidate process sees no GPU (no
device nodes under bwrap): it compiles without the lock.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kcoder.build.requests import PRIVATE_ROOT_ENV, private_build_root
from kcoder.devicelock import DeviceTurn, trace_event
from kcoder.evaluate.buildservice import BuildService
from kcoder.evaluate.harness.channel import ChannelError, Limits, Peer
from kcoder.evaluate.harness.handoff import socket_pair
from kcoder.evaluate.harness.timing import ALLOCATOR_ENV
from kcoder.evaluate.options import EvalOptions
from kcoder.evaluate.progress import StageReporter
from kcoder.evaluate.sandbox import Box, confined_command, kill_all, marked_pids, resident_bytes, scrubbed_env
from kcoder.procs import kill_group, read_tail
from kcoder.redact import is_secret_name
from kcoder.shutdown import shutting_down
from kcoder.trust import replace_file

LOG_TAIL_BYTES = 16 * 1024
WATCH_EVERY_S = 0.5
BACKGROUND_BUILD_S = 300.0  # how long an evaluation waits for a precompiled header being built
SHARED_MEMORY = Path("/dev/shm")
SHARED_MEMORY_SPARE = 2 * 2**30  # left free in /dev/shm beside two outputs in flight


class Children:
    """The reference and candidate processes of one evaluation, under `work` (a temp dir)."""

    def __init__(self, problem: Path, candidate: Path | None, options: EvalOptions, work: Path,
                 sandbox: str) -> None:
        """`candidate` None: only the reference process is ever started (baseline.py)."""
        self.work, self.sandbox, self.problem = work, sandbox, problem
        self.ref_proc: subprocess.Popen | None = None
        self.cand_proc: subprocess.Popen | None = None
        self.watched = 0.0
        self.gate_pages: dict[int, Any] = {}  # judgeclock.GatePage by process id (judgetiming.gate_page)
        self.turn = DeviceTurn(options.device, f"evaluate {options.stop_after}", options.on_stage)
        self.ref_box: Box | None = None  # the problem's own box (confine_problem)
        # Unix sockets to each process: outputs' descriptors travel candidate -> judge -> reference (handoff.py)
        self.ref_share: socket.socket | None = None
        self.cand_share: socket.socket | None = None
        # A session's (session.py): the reference's channel and start-up reply, kept for the next
        # candidate; `keep` a folder of the judge's where the reference keeps its hand-off files.
        self.ref_peer: Peer | None = None
        self.ref_info: dict | None = None
        self.keep: Path | None = None
        self.candidates = 0
        self._set_candidate(candidate, options, work)

    def _set_candidate(self, candidate: Path | None, options: EvalOptions, folder: Path) -> None:
        """A candidate's own things under `folder`: its box, hand-off folder and build service."""
        problem = self.problem
        self.options, self.candidate = options, candidate
        self.box = Box.create(folder)
        self.box.exchange = _shared_memory_folder()  # bound into the sandbox from the start
        # The candidate runs from copies in its box: its cwd is never the user's folder and no
        # bytecode lands beside the user's files.
        self.problem_copy = self.box.root / problem.name
        self.candidate_copy = self.box.root / (candidate or problem).name
        if self.problem_copy == self.candidate_copy:
            self.candidate_copy = self.box.root / f"candidate_{(candidate or problem).name}"
        self.host_limit = options.host_memory_bytes()
        self.progress = StageReporter(options.on_stage)
        self.turn.on_wait = options.on_stage
        # What kcoder hands the candidate (its job, the weights and constructor arguments the
        # reference process writes): a folder outside the box, read-only in the sandbox, so no
        # link the candidate plants can redirect a write of kcoder's unconfined processes.
        self.handoff = folder / "handoff"
        self.handoff.mkdir(mode=0o755)
        self.builds = BuildService(folder, self.box.root / "requests", self.sandbox, allow=list(options.allow),
                                   static_checks=options.static_checks) if candidate else None
        self.own_builds = private_build_root(candidate) if candidate else None

    def next_candidate(self, candidate: Path, options: EvalOptions) -> None:
        """A session's next candidate: everything of the last one's ended (its processes, box,
        builders; the device given back), a fresh box and hand-off folder; the reference process
        stays (it never loaded candidate code). Its reset (`reference.op_reset`) is the judge's."""
        self.end_candidate()
        for folder in (self.box.root, self.handoff):  # the last candidate's files go too
            shutil.rmtree(folder, ignore_errors=True)
        self.candidates += 1
        self._set_candidate(candidate, options, self.work / f"candidate{self.candidates}")

    def reuse_reference(self) -> Peer:
        """The kept reference process's channel, the device claimed for this candidate."""
        assert self.ref_peer is not None and self.ref_proc is not None
        self.turn.claim()
        trace_event("reuse", process="reference", what=self.turn.what, held=self.turn.held)
        self.ref_peer.notify = self.progress.reference_message
        return self.ref_peer

    def reference_alive(self) -> bool:
        return self.ref_proc is not None and self.ref_proc.poll() is None and self.ref_peer is not None

    def end_candidate(self) -> None:
        """End the candidate's processes and builders, drop its shared-memory folder and give
        the device back; the reference process stays."""
        try:
            self.stop_candidate()
            if self.builds is not None:
                self.builds.stop()
            if self.box.exchange is not None:
                shutil.rmtree(self.box.exchange, ignore_errors=True)
        finally:
            self.turn.release()

    def use_shared_memory(self, output_bytes: float) -> bool:
        """Outputs travel through /dev/shm when it has room for two of them: at real sizes a
        disk-backed folder costs seconds per GiB on every check."""
        self.box.use_exchange = (self.box.exchange is not None and
                                 _shared_memory_free() >= 2 * output_bytes + SHARED_MEMORY_SPARE)
        return self.box.use_exchange

    def _job(self, name: str, problem: Path, candidate: Path | None, share_fd: int | None = None) -> Path:
        job = {"problem": str(problem), "candidate": str(candidate) if candidate else None,
               "options": self.options.to_dict(), "init_path": str(self.handoff / "init.pt"),
               "weights_path": str(self.handoff / "weights.pt"), "handoff_fd": share_fd,
               "keep_dir": str(self.keep) if self.keep and not candidate else None}
        path = (self.handoff if candidate else self.work) / f"{name}.json"
        replace_file(path, json.dumps(job).encode())
        return path

    def _popen(self, argv: list[str], env: dict[str, str], name: str, cwd: Path,
               share: socket.socket | None = None) -> subprocess.Popen:
        log = open(self.work / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it from here
        try:
            return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                    start_new_session=True, env=env, cwd=cwd,
                                    pass_fds=[share.fileno()] if share else [])
        finally:
            log.close()
            if share is not None:
                share.close()  # the child's end lives in the child alone

    def start_reference(self) -> Peer:
        self.turn.claim()  # its forward passes and baselines run on the device
        trace_event("start", process="reference", what=self.turn.what, held=self.turn.held)
        self.ref_share, theirs = socket_pair()
        if self.options.confine_problem:
            self.ref_proc = self._start_confined_reference(theirs)
        else:
            job = self._job("reference", self.problem, None, theirs.fileno())
            env = {k: v for k, v in os.environ.items() if not is_secret_name(k)}
            env.update(PYTHONPATH=scrubbed_env(self.box)["PYTHONPATH"], PYTHONUNBUFFERED="1",
                       PYTHONDONTWRITEBYTECODE="1", **ALLOCATOR_ENV)
            env.pop("KCODER_EVAL_ID", None)
            # Under the reaper: if kcoder dies without cleaning up (SIGKILL), its parent-death
            # signal still ends the reference process and whatever it started (compile workers).
            argv = [sys.executable, "-m", "kcoder.evaluate.reaper", sys.executable, "-m",
                    "kcoder.evaluate.reference.server", str(job)]
            self.ref_proc = self._popen(argv, env, "reference", self.work, theirs)
        opts = self.options
        limits = Limits({"import": opts.problem_timeout_s, "compile": opts.problem_timeout_s,
                         "init": opts.problem_timeout_s}, opts.problem_timeout_s)
        self.progress.reference_started()
        self.ref_peer = Peer(self.ref_proc, limits, lambda: None, notify=self.progress.reference_message)
        return self.ref_peer

    def start_candidate(self) -> Peer:
        assert self.candidate is not None, "a reference-only evaluation starts no candidate"
        self.stop_candidate()
        if self.options.device == "cpu":
            self.turn.claim()  # compiling shares the cores that are the device (cuda: start_reference)
        # Fresh copies for every start: an earlier process of the candidate's may have
        # rewritten them (inside bwrap they are read-only as well).
        # (written whole and renamed into place: a link planted there is replaced, not followed)
        replace_file(self.problem_copy, self.problem.read_bytes())
        replace_file(self.candidate_copy, self.candidate.read_bytes())
        self.cand_share, theirs = socket_pair()
        job = self._job("candidate", self.problem_copy, self.candidate_copy, theirs.fileno())
        trace_event("start", process="candidate", what=self.turn.what, held=self.turn.held)
        assert self.builds is not None and self.own_builds is not None
        self.own_builds.mkdir(parents=True, exist_ok=True)
        self.builds.start()
        env = {**self._compile_only_env(), **self.builds.env(), PRIVATE_ROOT_ENV: str(self.own_builds)}
        # bwrap's PID namespace ends every process the candidate starts; without it, a subreaper
        compile_only = self.options.stop_after == "compile"  # no GPU device nodes in its sandbox either
        argv, env = confined_command([sys.executable, "-m", "kcoder.evaluate.candidate.worker", str(job)], self.box,
                                     "cpu" if compile_only else self.options.device, self.sandbox,
                                     [self.problem_copy, self.candidate_copy, self.handoff, self.builds.replies],
                                     [self.own_builds], **env, **ALLOCATOR_ENV)
        self.cand_proc = self._popen(argv, env, "candidate", self.box.root, theirs)
        opts = self.options
        limits = Limits({"import": opts.import_timeout_s, "compile": opts.build_timeout_s,
                         "init": opts.init_timeout_s}, opts.import_timeout_s)
        self.progress.candidate_started()
        return Peer(self.cand_proc, limits, self.watch_memory, notify=self.progress.candidate_message)

    def watch_memory(self) -> str | None:
        """The host-memory limit, checked while the judge waits for the candidate (a scan of
        /proc at most every WATCH_EVERY_S)."""
        now = time.monotonic()
        if now - self.watched < WATCH_EVERY_S:
            return None
        self.watched = now
        used = resident_bytes(marked_pids(self.box.marker))
        if used > self.host_limit:
            kill_all(self.box.marker)
            return (f"host memory limit: the candidate's processes used {used / 2**30:.1f} GiB "
                    f"(limit {self.host_limit / 2**30:.1f} GiB)")
        return None

    def freeze_candidate(self) -> set[int]:
        """Every process of the candidate's stopped (freeze.py); `freeze.thaw` continues them."""
        from kcoder.evaluate.freeze import freeze

        return freeze(self.cand_proc.pid if self.cand_proc is not None else None)

    def candidate_returncode(self) -> int | None:
        if self.cand_proc is None:
            return None
        try:
            return self.cand_proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return None

    def log_tail(self, name: str) -> str:
        path = self.work / f"{name}.log"
        return read_tail(path, LOG_TAIL_BYTES) if path.exists() else ""

    def stop_candidate(self, peer: Peer | None = None) -> None:
        """End the candidate's process and every process it started (setsid or not). With
        `peer`, kcoder's own background build jobs in it may finish first."""
        if self.cand_proc is None:
            return
        if peer is not None and not shutting_down():  # kcoder is ending: nothing waits
            try:
                peer.request(BACKGROUND_BUILD_S + 5, op="finish", wait_s=BACKGROUND_BUILD_S)
            except ChannelError:
                pass
        _close_pipes(self.cand_proc)
        if self.sandbox != "bwrap":  # let the reaper kill what escaped the group first
            self.cand_proc.terminate()
            try:
                self.cand_proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        kill_group(self.cand_proc)
        kill_all(self.box.marker)
        self.cand_proc = None
        if self.builds is not None:  # kcoder's builders finish what they started (a .gch), alone
            self.builds.wait(0.0 if shutting_down() else BACKGROUND_BUILD_S)
        self.cand_share = _close_socket(self.cand_share)

    def close(self) -> None:
        try:
            self.stop_candidate()
            if self.ref_proc is not None:
                _close_pipes(self.ref_proc)
                kill_group(self.ref_proc)
                self.ref_proc = None
            self.ref_peer = self.ref_info = None
            self.ref_share = _close_socket(self.ref_share)
            if self.ref_box is not None:
                kill_all(self.ref_box.marker)
            for page in self.gate_pages.values():
                page.close()
            self.gate_pages.clear()
        finally:
            self.end_candidate()  # nothing of this evaluation runs on the device any more

    def _compile_only_env(self) -> dict[str, str]:
        """A compile-only start on cuda: no GPU visible (host work only), and the arch the timed
        evaluation will compile for, so that its build finds this one in the cache."""
        if self.options.stop_after != "compile" or self.options.device != "cuda":
            return {}
        env = {"CUDA_VISIBLE_DEVICES": ""}
        if "TORCH_CUDA_ARCH_LIST" not in os.environ and self.options.build_arch:
            env["TORCH_CUDA_ARCH_LIST"] = self.options.build_arch
        return env

    def _start_confined_reference(self, share: socket.socket) -> subprocess.Popen:
        """The reference process in a box of its own: a problem file kcoder's user did not
        choose runs with a scrubbed environment (and under bwrap when the candidate is); it may
        write only its box and the hand-off folder (weights, init inputs); it reads the
        candidate's outputs from the shared-memory folder both see."""
        self.ref_box = Box.create(self.work / "reference")
        self.ref_box.exchange = self.box.exchange
        copy = self.ref_box.root / self.problem.name
        shutil.copyfile(self.problem, copy)
        job = self._job("reference", copy, None, share.fileno())
        inner = [sys.executable, "-m", "kcoder.evaluate.reference.server", str(job)]
        argv, env = confined_command(inner, self.ref_box, self.options.device, self.sandbox, [copy, job],
                                     [self.handoff, self.box.io], **ALLOCATOR_ENV)
        return self._popen(argv, env, "reference", self.ref_box.root, share)


def _shared_memory_free() -> int:
    """Free bytes in /dev/shm (0 when there is none)."""
    try:
        stats = os.statvfs(SHARED_MEMORY)
    except OSError:
        return 0
    return stats.f_bavail * stats.f_frsize


def _shared_memory_folder() -> Path | None:
    if _shared_memory_free() < SHARED_MEMORY_SPARE:
        return None
    try:
        return Path(tempfile.mkdtemp(prefix="kcoder-outputs-", dir=SHARED_MEMORY))
    except OSError:
        return None


def _close_socket(sock: socket.socket | None) -> None:
    if sock is not None:
        sock.close()


def _close_pipes(proc: subprocess.Popen) -> None:
    for pipe in (proc.stdin, proc.stdout):
        try:
            if pipe:
                pipe.close()
        except OSError:
            pass
