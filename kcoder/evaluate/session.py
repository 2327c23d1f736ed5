"""Evaluations of several candidates of one problem that share a reference process.

A tune run, a suite with several candidates of a problem, an RL episode: each candidate is
judged as `evaluate` judges it, except that the reference process (the problem loaded, its
model built, its start-up reply, its torch.compile model) is started once and kept between
candidates. A candidate costs its own process start, import, verification and timing.

Trust is unchanged: the reference process never loads candidate code, so keeping it is safe.
Every candidate gets a fresh box, hand-off folder and sandboxed process; before the next
candidate starts, everything of the last one's is ended (`Children.next_candidate`), the device
is given back between candidates, and the reference process is reset (`reference.op_reset`:
the weights and constructor arguments written again from the copies it kept before any forward
pass, the checks' state cleared, descriptors left unread closed). Each evaluation draws its
own seeds (the Judge's). Baselines are timed only while no candidate process is alive, as in
any evaluation (judge.time_all); across candidates they come from the baseline cache
(basecache.py).

The reference process is kept only while what it was started with still holds: the same
problem file contents, device, precision, seed, torch.compile baseline and sandbox mode; a
problem run in a box of its own (`confine_problem`) is never kept. After an evaluation error,
a problem error or a dead reference process, the next candidate starts a fresh one.
"""

from __future__ import annotations

import hashlib
import tempfile
import threading
from pathlib import Path
from typing import Any

from kcoder.evaluate.options import EvalOptions
from kcoder.evaluate.runner import evaluate, judge_alone, run_judge
from kcoder.evaluate.spawn import Children
from kcoder.problem import load_problem
from kcoder.verdict import Verdict


def _key(problem: Path, options: EvalOptions, mode: str) -> tuple[Any, ...]:
    """What the reference process was started with: a candidate needing anything else gets a
    fresh one."""
    digest = hashlib.sha256(problem.read_bytes()).hexdigest()
    return (digest, options.device, options.precision, options.seed, options.compile_baseline, mode,
            options.problem_timeout_s)


class EvalSession:
    """Candidates of `problem_path`, judged one after another with one reference process.
    Use as a context manager (or call `close`): it ends the reference process."""

    def __init__(self, problem_path: str | Path, options: EvalOptions | None = None) -> None:
        self.problem = load_problem(problem_path).path
        self.options = options
        self.children: Children | None = None
        self.key: tuple[Any, ...] | None = None
        self.folder: tempfile.TemporaryDirectory[str] | None = None
        self.lock = threading.Lock()  # one candidate at a time
        self.references_started = 0  # reference processes this session started (information)

    def __enter__(self) -> EvalSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def evaluate(self, candidate_path: str | Path, options: EvalOptions | None = None) -> Verdict:
        """`kcoder.evaluate.evaluate` of a candidate of this session's problem."""
        return evaluate(self.problem, candidate_path, options or self.options, session=self)

    def evaluator(self, problem: Path, candidate: Path, options: EvalOptions) -> Verdict:
        """tune's Evaluator: this session for its problem, a plain evaluation for another."""
        if Path(problem).resolve() != self.problem:
            return evaluate(problem, candidate, options)
        return self.evaluate(candidate, options)

    def judge(self, candidate: Path, options: EvalOptions, verdict: Verdict, mode: str) -> None:
        """The judge's stages for `candidate` (called by runner.evaluate after its static checks)."""
        if options.stop_after == "compile" or options.confine_problem:
            # no reference process to keep (compile-only), or none that may be kept
            judge_alone(self.problem, candidate, options, verdict, mode)
            return
        with self.lock:
            children = self._children_for(candidate, options, mode)
            kept = False
            try:
                run_judge(self.problem, candidate, options, verdict, children)
                kept = verdict.status != "error" and children.reference_alive()
            finally:
                if kept:
                    children.end_candidate()
                else:
                    self._drop()

    def reference_pid(self) -> int | None:
        """The kept reference process's PID (None when none is kept)."""
        children = self.children
        return children.ref_proc.pid if children is not None and children.ref_proc is not None else None

    def _children_for(self, candidate: Path, options: EvalOptions, mode: str) -> Children:
        key = _key(self.problem, options, mode)
        if self.children is not None and (key != self.key or not self.children.reference_alive()):
            self._drop()
        if self.children is None:
            self.folder = tempfile.TemporaryDirectory(prefix="kcoder-session-")
            work = Path(self.folder.name)
            self.children = Children(self.problem, candidate, options, work, mode)
            self.children.keep = work / "reference-keep"
            self.children.keep.mkdir(mode=0o700)
            self.key = key
            self.references_started += 1
        else:
            self.children.next_candidate(candidate, options)
        return self.children

    def _drop(self) -> None:
        """End the kept reference process and everything of the session's."""
        children, folder = self.children, self.folder
        self.children = self.folder = self.key = None
        try:
            if children is not None:
                children.close()
        finally:
            if folder is not None:
                folder.cleanup()

    def close(self) -> None:
        with self.lock:
            self._drop()


__all__ = ["EvalSession"]
