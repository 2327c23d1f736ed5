"""kcoder's side of build requests (build/requests.py): while a candidate's process runs, a
thread of the judge's process watches the requests folder in its box, starts a confined
trusted builder (build/builder.py) per request, and writes each answer into a folder the
candidate reads but cannot write.

The request is the candidate's writing: read without following a link, bounded in size,
checked before anything is built. The builder's sandbox may write the shared build products
(`build/`, `objects/`, `pch/`, `light/`) and nothing of the candidate's can reach it: its own
PID namespace, its own box, a copy of the request.

The static rules on native code read the text as compiled here, in the judge's process: the
candidate's file is checked before it runs (string constants alone, and strings it builds from
constants), but a name joined at run time is whole only in the request's sources. Each request
is checked first (static/compiled.py: the translation units `load_inline` makes of its sources,
bindings and `-D` flags), with the evaluation's `allow` and `static_checks`: a finding answers
as a build failure naming the rule and the snippet (an "error", which the candidate's wrapper
raises, not a refusal, after which it would build the request itself), and stays in
`static_findings`, which the candidate's process cannot reach.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcoder.build import requests
from kcoder.evaluate.sandbox import SHARED_PRODUCTS, Box, confined_command, kill_all
from kcoder.evaluate.static.compiled import BuildFinding, build_findings
from kcoder.paths import cache_root
from kcoder.procs import kill_group, last_line, spawn_logged
from kcoder.trust import UnsafeFile, read_plain, remove_plain, replace_file

POLL_S = 0.1


@dataclass
class _Job:
    proc: subprocess.Popen
    box: Box
    result: Path
    answered: bool = False


class BuildService:
    """The build requests of one candidate box (`requests`), answered into `replies`."""

    def __init__(self, work: Path, requests_dir: Path, sandbox: str, *, allow: list[str] | None = None,
                 static_checks: bool | None = None) -> None:
        """`allow`, `static_checks`: the evaluation's options (EvalOptions); None: read from the
        candidate's job file, which the judge writes in `work`'s hand-off folder (outside the
        box, read-only to the candidate) before the candidate starts."""
        self.work, self.requests, self.sandbox = work, requests_dir, sandbox
        self.allow, self.static_checks = (list(allow) if allow is not None else None), static_checks
        # Every request refused by the static rules (described), in the judge's own memory.
        self.static_findings: list[str] = []
        self.replies = work / "replies"
        for folder in (self.requests, self.replies, work / "builders"):
            folder.mkdir(parents=True, exist_ok=True)
        self.jobs: dict[str, _Job | None] = {}  # None: answered without a builder
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def env(self) -> dict[str, str]:
        """What the candidate's process needs to send requests here."""
        return {requests.REQUESTS_ENV: str(self.requests), requests.REPLIES_ENV: str(self.replies)}

    def start(self) -> None:
        if self.thread is None:
            self.stopping.clear()
            self.thread = threading.Thread(target=self._loop, name="kcoder-build-service", daemon=True)
            self.thread.start()

    def _loop(self) -> None:
        while not self.stopping.wait(POLL_S):
            with self.lock:
                self.poll()

    def poll(self) -> None:
        """Take new requests, answer finished builds."""
        try:
            names = sorted(p.name for p in self.requests.iterdir())
        except OSError:
            names = []
        for name in names:
            if name.endswith(".json") and not name.startswith(".") and name[:-5] not in self.jobs:
                self._take(name[:-5])
        for name, job in self.jobs.items():
            if job is not None and not job.answered:
                self._answer(name, job)

    def _take(self, name: str) -> None:
        path = self.requests / f"{name}.json"
        try:
            data = read_plain(path, requests.MAX_REQUEST_BYTES + 1)
            remove_plain(path)
            if len(data) > requests.MAX_REQUEST_BYTES:
                raise requests.Refused("the request is too large")
            request = json.loads(data)
            if not isinstance(request, dict):
                raise requests.Refused("the request is not a JSON object")
            params = request.get("params") or {}
            if not isinstance(params, dict):
                raise requests.Refused("the request's params are not a JSON object")
            findings = self.source_findings(params)
            if not findings:
                requests.check_params(params)
        except (UnsafeFile, ValueError) as exc:  # Refused is a ValueError
            self._reply(name, {"refused": str(exc)[:300]})
            self.jobs[name] = None
            return
        if findings:  # before its flags are judged: a refused request would be built by the candidate
            described = [f if isinstance(f, str) else f.describe() for f in findings]
            self.static_findings += described
            self._reply(name, {"error": described[0], "log": "\n".join(described),
                               "record": {"mode": "static check", "notes": [], "compiles": 0}})
            self.jobs[name] = None
            return
        self.jobs[name] = self._start_builder(name, request)

    def source_findings(self, params: dict[str, Any]) -> list[BuildFinding | str]:
        """The native rules' findings in the text these load_inline arguments compile. A failure
        of the check itself fails closed (the request would otherwise be built unchecked)."""
        checks, allow = self._policy()
        if not checks:
            return []
        try:
            return list(build_findings(params, allow))
        except Exception as exc:  # kcoder's own failure, said as such
            return [f"kcoder's static check of the build's sources failed ({type(exc).__name__}: {exc}); "
                    "the build was not made"]

    def _policy(self) -> tuple[bool, list[str]]:
        """(static checks on, libraries allowed): as given, else from the candidate's job file."""
        if self.static_checks is None or self.allow is None:
            options: dict[str, Any] = {}
            try:
                job = json.loads(read_plain(self.work / "handoff" / "candidate.json", 1 << 20))
                found = job.get("options") if isinstance(job, dict) else None
                options = found if isinstance(found, dict) else {}
            except (OSError, ValueError):
                pass  # no job yet: checks on, nothing allowed (the stricter reading)
            if self.static_checks is None and "static_checks" in options:
                self.static_checks = options["static_checks"] is not False
            if self.allow is None and isinstance(options.get("allow"), list):
                self.allow = [a for a in options["allow"] if isinstance(a, str)]
        return self.static_checks is not False, list(self.allow or [])

    def _start_builder(self, name: str, request: dict[str, Any]) -> _Job:
        box = Box.create(self.work / "builders" / name)
        request_copy, result = box.root / "request.json", box.root / "result.json"
        request_copy.write_text(json.dumps(request))
        shared = [cache_root() / folder for folder in SHARED_PRODUCTS]
        for folder in shared:
            folder.mkdir(parents=True, exist_ok=True)
        argv, env = confined_command([sys.executable, "-m", "kcoder.build.builder", str(request_copy), str(result)],
                                     box, "cpu", self.sandbox, [request_copy], shared)
        return _Job(spawn_logged(argv, env, box.root, box.root.parent / "builder.log"), box, result)

    def _answer(self, name: str, job: _Job) -> None:
        if job.result.exists():
            try:
                reply = json.loads(job.result.read_text())
            except (OSError, ValueError):
                reply = {"refused": "kcoder's builder wrote an unreadable result"}
        elif job.proc.poll() is not None:
            tail = last_line(job.box.root.parent / "builder.log")[:200]
            reply = {"refused": f"kcoder's builder ended without a result: {tail}"}
        else:
            return
        self._reply(name, reply)
        job.answered = True

    def _reply(self, name: str, reply: dict[str, Any]) -> None:
        replace_file(self.replies / f"{name}.json", json.dumps(reply, default=str).encode())

    def running(self) -> int:
        with self.lock:
            return sum(1 for job in self.jobs.values() if job is not None and job.proc.poll() is None)

    def wait(self, limit_s: float) -> None:
        """Let running builders (and their background jobs) finish for up to `limit_s`, then
        end them."""
        deadline = time.monotonic() + limit_s
        while self.running() and time.monotonic() < deadline:
            time.sleep(POLL_S)
        self.stop()

    def stop(self) -> None:
        """Stop taking requests and end every builder."""
        self.stopping.set()
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        with self.lock:
            for job in filter(None, self.jobs.values()):
                if job.proc.poll() is None:
                    kill_group(job.proc)
                kill_all(job.box.marker)
                job.answered = True
