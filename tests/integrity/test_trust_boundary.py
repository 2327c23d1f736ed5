"""Red team of the evaluator's trust boundary (issue 15), cpu target.

Each attacking candidate tries to get a verdict it did not earn, to leak a secret, or to leave
something behind: forged replies on the judge's channel (from Python and from C++), the job
file found through argv and /proc/self/cmdline, /proc/self/mem writes, the API key into a
file, the reason and the output, writes outside its box (pathlib, os, C++ fopen), a network
connection, a setsid daemon, fork through a function pointer, a native timer hijack, and
background load against the baselines. Each must be refused with a clear reason or have no
effect on the verdict; the honest candidate is accepted in both sandbox modes.

Where the static checks refuse an attack, the attack runs twice: as is (test_static_refusal)
and with static_checks=False, to show that the sandbox and the judge hold on their own.
Attacks whose defence needs bubblewrap (files, network, other processes' /proc) run under
sandbox="bwrap"; those the judge or kcoder's process bookkeeping defeat run under both modes.

Native attacks share one build (tests/sources.py:ATTACK_CPP); Python-only attacks reuse
TESTLIB_CPP's build through candidate_source().
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from helpers import PROBLEMS, ROOT, fast_options
from machine import Watch, Window, can_run, process_table
from sources import ATTACK_FUNCTIONS, attack_candidate_source, attack_part_cpp, candidate_source

pytestmark = pytest.mark.slow

BOTH = ["bwrap", "none"]
KEY_VAR = "OPENAI_API_KEY"
HONEST_FORWARD = "return _ext.scale_add_relu(x, y, self.scale)"
HONEST = candidate_source(HONEST_FORWARD)
TIMED = dict(compile_baseline=False)  # the eager baseline is enough to see a false speed-up
OUTER_CLOCK = "the judge's own clock measured"


# --- helpers ----------------------------------------------------------------------------------
def unique_name() -> str:
    """A process name (comm, at most 15 characters) no other process has."""
    return "kc" + secrets.token_hex(5)


def named_pids(name: str) -> list[int]:
    """Processes named `name` (their comm) that can still run code (machine.can_run)."""
    return [pid for pid, (_, _, comm) in process_table().items() if comm == name and can_run(pid)]


def survivors(*names: str, wait_s: float = 5.0) -> list[int]:
    """Processes still named `names` after up to `wait_s` (a PID namespace is torn down
    asynchronously). Any found are killed here, by pid, so a failing test leaves none."""
    deadline = time.monotonic() + wait_s
    while True:
        found = [pid for name in names for pid in named_pids(name)]
        if not found or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return found


def as_json(verdict) -> str:
    return json.dumps(verdict.to_dict())


def assert_refused(verdict, stage: str | None = None) -> None:
    """Rejected with a reason, never accepted and never an evaluation error."""
    assert verdict.status == "rejected" and verdict.reward == -1 and not verdict.correct, as_json(verdict)
    assert verdict.reason, as_json(verdict)
    if stage:
        assert verdict.stage == stage, as_json(verdict)


def assert_accepted(verdict, sandbox: str) -> None:
    assert verdict.status == "accepted" and verdict.correct and verdict.reward >= 1, as_json(verdict)
    assert verdict.sandbox == sandbox


def dynamic(evaluate_candidate, source: str, sandbox: str, **options):
    """Evaluate with the static checks off: only the sandbox and the judge stand in the way."""
    verdict = evaluate_candidate(source, sandbox=sandbox, static_checks=False, **options)
    print(f"verdict ({sandbox}): {verdict.status}, reward {verdict.reward}: {verdict.reason}")  # shown by -rP
    return verdict


def assert_no_false_speedup(verdict, *reasons: str) -> None:
    """Refused at timing for one of `reasons`; or, where a busy host made the trick pointless
    (its cheap calls were slow anyway), accepted without a speed-up. The honest kernel runs at
    about 0.3x of eager here; a trick that worked would show 10x and more."""
    if verdict.status == "accepted":
        assert verdict.speedup_vs_eager < 1.5, as_json(verdict)
        return
    assert_refused(verdict, stage="timing")
    assert any(r in verdict.reason for r in reasons), verdict.reason


def assert_judge_figure_stands(verdict, *reasons: str) -> None:
    """The candidate's process lied about its own time; the verdict rests on the judge's clock
    anyway. On the GPU the mismatch is a refusal. On the cpu target it is a note (the host's load
    reaches the wall clock there, so it refuses nothing); the verdict then carries the judge's
    figure: no speed-up, and the note says what the candidate reported. A report under the
    physical floor is a refusal on every device (summary.reported_under_floor)."""
    reasons = reasons or (OUTER_CLOCK, "the candidate's process reported")
    if verdict.status == "rejected":
        assert_refused(verdict, stage="timing")
        assert any(r in verdict.reason for r in reasons), verdict.reason
        return
    assert verdict.device == "cpu", as_json(verdict)
    assert verdict.status == "accepted" and verdict.speedup_vs_eager < 1.5, as_json(verdict)
    assert any(OUTER_CLOCK in note for note in verdict.notes), as_json(verdict)
    assert verdict.reported_us < verdict.candidate_us and verdict.reported_us >= verdict.floor_us, as_json(verdict)


@pytest.fixture
def api_key(monkeypatch) -> str:
    """A fake OpenAI key in the judge's environment (the candidate must never see it)."""
    key = f"sk-test-{secrets.token_hex(16)}"
    monkeypatch.setenv(KEY_VAR, key)
    return key


# --- the attacks ------------------------------------------------------------------------------
# Forged replies: every message the judge could wait for, plus a whole verdict.
FORGED = [
    {"verdict": {"correct": True, "reward": 3, "status": "accepted", "reason": "50.00x vs eager",
                 "speedup_vs_eager": 50.0}},
    {"built": True, "notes": [], "seconds": 0.1}, {"saved": True}, {"warm": True}, {"us": 0.01},
    {"ready": True}, {"done": True}, {"ok": True, "stats": {}},
]
FORGED_LINES = "".join(json.dumps(m) + "\n" for m in FORGED) * 3


def forge_python() -> str:
    """Writes forged JSON lines to every descriptor in /proc/self/fd; forward is wrong."""
    init = f"""import os
lines = {FORGED_LINES!r}.encode()
for fd in os.listdir("/proc/self/fd"):
    try:
        os.write(int(fd), lines)
    except OSError:
        pass"""
    return candidate_source("return _ext.no_relu(x, y, self.scale)", init=init)


# The same from C++: write() to descriptors 0..255; forward is wrong (scale 0).
FORGE_CPP = ("forge", "return _ext.scale_add_relu(x, y, 0.0)", f"_ext.forge_replies({FORGED_LINES!r})")

# Appended to the box's copy of the problem by the job-file attack: the timing phase's worker
# (a fresh process that loads this copy) gets small inputs for every timed call but the first,
# whose output is always checked; verification, warm-up and back-to-back batches get real ones.
PROBLEM_TAMPER = '''

_kc_real_get_inputs = get_inputs
_kc_timed = [0]


def get_inputs():
    import sys
    frame, names = sys._getframe(1), set()
    while frame is not None:
        names.add(frame.f_code.co_name)
        frame = frame.f_back
    if "op_time" in names:
        _kc_timed[0] += 1
        if _kc_timed[0] > 1:
            return [torch.randn(4, 8), torch.randn(4, 8)]
    return _kc_real_get_inputs()
'''


# The reply channel from inside: the worker's own end (found through gc) rewrites every reported
# time to a hundredth before it is sent. Well-formed replies; only the judge's clock can tell.
REPLY_REWRITE_INIT = """import gc
for obj in gc.get_objects():
    if type(obj).__name__ == "Link" and hasattr(obj, "reply"):
        def reply(send=obj.reply, **message):
            if isinstance(message.get("us"), float):
                message["us"] = message["us"] / 100
            send(**message)

        obj.reply = reply"""


def job_file_discovery() -> str:
    """Finds its job file through sys.argv and /proc/self/cmdline and rewrites the problem file
    that it names (the worker of the timing phase loads it again)."""
    init = f"""import json
import sys
with open("/proc/self/cmdline", "rb") as fh:
    argv = [a.decode() for a in fh.read().split(b"\\0") if a]
job_path = [a for a in sys.argv + argv if a.endswith(".json")][-1]
with open(job_path) as fh:
    job = json.load(fh)
with open(job["problem"]) as fh:
    text = fh.read()
if "_kc_real_get_inputs" not in text:
    with open(job["problem"], "a") as fh:
        fh.write({PROBLEM_TAMPER!r})"""
    return candidate_source(HONEST_FORWARD, init=init)


# /proc/self/mem: retype the time.perf_counter object (its identity, which the worker checks,
# stays the same) to a class whose __call__ returns perf_counter / 100.
PROC_MEM_HEADER = '''import os
import time

_REAL_NS = time.perf_counter_ns


class _SlowClock:
    __slots__ = ()

    def __call__(self):
        return _REAL_NS() / 1e11


_HOLD = [_SlowClock] * 4


def _retype(obj, new_type):
    fd = os.open("/proc/self/mem", os.O_RDWR)
    try:
        os.pwrite(fd, id(new_type).to_bytes(8, "little"), id(obj) + 8)
    finally:
        os.close(fd)
'''


def proc_self_mem() -> str:
    return candidate_source(HONEST_FORWARD, header=PROC_MEM_HEADER, init="_retype(time.perf_counter, _SlowClock)")


# The key where the candidate's own process could find it: its environment.
KEY_HUNT_OWN = r'''import os


def _hunt_key():
    found = os.environ.get("OPENAI_API_KEY") or ""
    with open("/proc/self/environ", "rb") as fh:
        for item in fh.read().split(b"\0"):
            if item.startswith(b"OPENAI_API_KEY=") and not found:
                found = item.split(b"=", 1)[1].decode()
    return found
'''

# ... and in every process it can see (the judge's initial environment among them).
KEY_HUNT_ALL = r'''import os


def _hunt_key():
    found = os.environ.get("OPENAI_API_KEY") or ""
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or found:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                for item in fh.read().split(b"\0"):
                    if item.startswith(b"OPENAI_API_KEY="):
                        found = item.split(b"=", 1)[1].decode()
        except OSError:
            pass
    return found
'''


def key_to_file_and_output(targets: list[str]) -> str:
    """Writes whatever key it finds to `targets`, and encodes it into its output."""
    init = f"""import pathlib
self.key = _hunt_key()
for target in {targets!r}:
    try:
        pathlib.Path(target).write_text("stolen: " + self.key)
    except OSError:
        pass"""
    forward = """out = _ext.scale_add_relu(x, y, self.scale)
if self.key:
    out.view(-1)[: len(self.key)] = torch.tensor([float(b) for b in self.key.encode()])
return out"""
    return candidate_source(forward, header=KEY_HUNT_OWN, init=init)


def key_to_reason() -> str:
    """Prints the key to the log and raises with it (the reason)."""
    forward = """print("stolen:", self.key, os.environ.get("OPENAI_API_KEY"))
raise RuntimeError(f"stolen key: {self.key!r} {os.environ.get('OPENAI_API_KEY')!r}")"""
    return candidate_source(forward, header=KEY_HUNT_OWN, init="self.key = _hunt_key()")


def key_from_other_processes(target: str) -> str:
    """Searches every visible process's environment, writes the key outside its box, and
    raises with it in plain and reversed (redaction only knows the plain value)."""
    init = f"""import pathlib
key = _hunt_key()
try:
    pathlib.Path({target!r}).write_text("stolen: " + key)
except OSError:
    pass
print("stolen:", key)
raise RuntimeError(f"stolen key: {{key}} reversed: {{key[::-1]}}")"""
    return candidate_source(HONEST_FORWARD, header=KEY_HUNT_ALL, init=init)


def write_pathlib(targets: list[str]) -> str:
    return f"""import pathlib
for target in {targets!r}:
    try:
        pathlib.Path(target).write_text("pwned")
    except OSError:
        pass"""


def write_os(targets: list[str]) -> str:
    return f"""import os
for target in {targets!r}:
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"pwned")
        os.close(fd)
    except OSError:
        pass"""


def write_fopen(targets: list[str]) -> str:
    return f"for target in {targets!r}:\n    _ext.write_file(target, 'pwned')"


# Memoises on identical input objects: fresh inputs (verification, timed calls, audits) always
# miss; only a back-to-back batch, which repeats one input set, hits.
MEMO_FORWARD = """if x is self.prev_x and y is self.prev_y:
    return self.prev_out
out = _ext.scale_add_relu(x, y, self.scale)
self.prev_x, self.prev_y, self.prev_out = x, y, out
return out"""
MEMO_INIT = "self.prev_x = self.prev_y = self.prev_out = None\n"
HIJACK_INIT = "_ext.hijack_perf_counter(100.0)"


# --- the static layer ---------------------------------------------------------------------------
PLACEHOLDER = "/nonexistent/kcoder-redteam/target"


def native_static(part: str, forward: str, init: str) -> str:
    """A candidate with only one native attack in its C++ (what the static checks see of it)."""
    return attack_candidate_source(forward, init=init, cpp=attack_part_cpp(part))


STATIC_CASES = {
    "forge-python": (forge_python, "proc-access"),
    "forge-cpp": (lambda: native_static(*FORGE_CPP), "file-io"),
    "job-file-discovery": (job_file_discovery, "harness"),
    "reply-rewrite": (lambda: candidate_source(HONEST_FORWARD, init=REPLY_REWRITE_INIT), "introspection"),
    "proc-self-mem": (proc_self_mem, "proc-access"),
    "key-to-file-and-output": (lambda: key_to_file_and_output([PLACEHOLDER]), "secrets"),
    "key-to-reason": (key_to_reason, "secrets"),
    "key-from-other-processes": (lambda: key_from_other_processes(PLACEHOLDER), "secrets"),
    "write-pathlib": (lambda: candidate_source(HONEST_FORWARD, init=write_pathlib([PLACEHOLDER])), "file-io"),
    "write-os": (lambda: candidate_source(HONEST_FORWARD, init=write_os([PLACEHOLDER])), "file-io"),
    "write-fopen": (lambda: native_static("fopen", HONEST_FORWARD, write_fopen([PLACEHOLDER])), "file-io"),
    "network-connect": (lambda: native_static("connect", HONEST_FORWARD, "_ext.connect_to(9)"), "network"),
    "setsid-daemon": (lambda: native_static("daemon", HONEST_FORWARD, "_ext.start_daemon('x', 0, True)"),
                      "process"),
    "fork-pointer": (lambda: native_static("fork-pointer", HONEST_FORWARD, "_ext.fork_via_pointer('x', False)"),
                     "process"),
    "fork-dlsym": (lambda: native_static("fork-pointer", HONEST_FORWARD, "_ext.fork_via_pointer('x', True)"),
                   "symbol-hijack"),
    "background-spin-thread": (lambda: native_static("spin-thread", HONEST_FORWARD, "_ext.spin_thread(60.0)"),
                               "thread"),
}


@pytest.mark.parametrize("name", sorted(STATIC_CASES))
def test_static_refusal(evaluate_candidate, name):
    """Each attack as is: refused by the static checks before anything runs."""
    make, check = STATIC_CASES[name]
    verdict = evaluate_candidate(make(), stop_after="verify")
    assert_refused(verdict, stage="static")
    assert verdict.reason.startswith("static check ["), verdict.reason
    assert f"[{check}]" in verdict.log, verdict.log


def test_static_sees_native_timer_hijack():
    from kcoder.evaluate.static import check_source

    source = attack_candidate_source(MEMO_FORWARD, init=MEMO_INIT + HIJACK_INIT, cpp=attack_part_cpp("timer-hijack"))
    assert check_source(source, reference_stems={"scale_add"}), "no static finding"


# --- the honest candidate and the baselines --------------------------------------------------------
_HONEST_TIMED: dict[str, object] = {}


def honest_timed(sandbox: str, tmp_path_factory):
    """The honest candidate, timed (one evaluation per sandbox mode, shared by the tests)."""
    if sandbox not in _HONEST_TIMED:
        from kcoder.evaluate import evaluate

        path = tmp_path_factory.mktemp("honest") / "model_new.py"
        path.write_text(HONEST)
        verdict = evaluate(PROBLEMS / "scale_add.py", path, fast_options(sandbox=sandbox, **TIMED))
        print(f"honest verdict ({sandbox}): {verdict.status}, reward {verdict.reward}: {verdict.reason}")
        _HONEST_TIMED[sandbox] = verdict
    return _HONEST_TIMED[sandbox]


@pytest.mark.parametrize("sandbox", BOTH)
def test_honest_candidate_accepted(tmp_path_factory, sandbox):
    verdict = honest_timed(sandbox, tmp_path_factory)
    assert_accepted(verdict, sandbox)
    assert verdict.stage == "done" and verdict.eager_us and verdict.candidate_us, as_json(verdict)
    assert any(note.startswith("judge's clock:") for note in verdict.notes), verdict.notes


# Background load started in __init__ (so in both the verification and the timing process): a
# setsid'd daemon that spins at once, one that waits for the candidate's process to end and then
# spins (aimed at the baselines), and a detached spinning thread. One evaluation per sandbox mode,
# watched by tests/machine.py every 50 ms while the judge times its baselines, serves both tests.
_SABOTAGED: dict[str, tuple[object, list[Window]]] = {}


def sabotaged(evaluate_candidate, monkeypatch, sandbox: str):
    if sandbox not in _SABOTAGED:
        from kcoder.evaluate.basetimer import Baselines

        names = (unique_name(), unique_name())
        watch, timed = Watch(names), Baselines.measure

        def watched_baselines(self, deadline):  # one half of the baselines; the judge runs in this process
            with watch.window(allowed_root=self.judge.children.ref_proc.pid):  # the reference process may run
                return timed(self, deadline)

        monkeypatch.setattr(Baselines, "measure", watched_baselines)
        init = "\n".join(f"_ext.start_daemon({n!r}, {mode}, False)" for mode, n in enumerate(names, 1))
        init += "\n_ext.spin_thread(1.0)"
        try:
            verdict = dynamic(evaluate_candidate, attack_candidate_source(HONEST_FORWARD, init=init), sandbox, **TIMED)
        finally:
            left = survivors(*names)
        assert not left, f"a spinning daemon outlived the evaluation: {left}"
        _SABOTAGED[sandbox] = (verdict, watch.windows)
    return _SABOTAGED[sandbox]


@pytest.mark.parametrize("sandbox", BOTH)
def test_no_candidate_process_runs_beside_the_baselines(evaluate_candidate, monkeypatch, sandbox):
    """Deterministic: while the baselines are timed (both halves), no process of the candidate's
    is alive, in this test's process tree or anywhere under the daemons' names; none survives."""
    verdict, windows = sabotaged(evaluate_candidate, monkeypatch, sandbox)
    assert_accepted(verdict, sandbox)
    assert len(windows) == 2 and all(w.samples >= 1 for w in windows), [w.describe() for w in windows]
    for window in windows:
        assert not window.strays, f"the candidate's processes beside the baselines: {window.strays}"
        assert not window.named, f"a spinning daemon beside the baselines: {window.named}"


# The timing consequence, measured: eager within 2.5x of the honest run's. On a shared host (CI here:
# two cores, several engineers' builds and tests) the eager baseline's OpenMP threads slow 2-3x
# whenever other processes run, honest candidate or not: on 2026-12-05, sampled every 50 ms, every
# baseline window had the CPUs 100% busy with other users' compilers and tests while nothing of the
# candidate's was alive (honest eager 64-156 ms, sabotaged 95-173 ms, in the same hour). So the
# comparison is made only on a quiet host; otherwise the test is skipped with what ran instead.
# On a quiet host eager was still 2.5-3.5x slower in some runs (331 vs 1143 us): glibc's adaptive
# heap thresholds left some reference processes faulting eager's 2 MiB results in afresh on every
# call, whichever candidate ran before (issue 37; timing.ALLOCATOR_ENV now fixes the policy for the
# reference and the candidate alike, and tests/unit/test_heap_policy.py checks it).
FOREIGN_SHARE_MAX = 0.10


@pytest.mark.parametrize("sandbox", BOTH)
def test_baselines_not_slowed_by_background_load(evaluate_candidate, monkeypatch, tmp_path_factory, sandbox):
    verdict, windows = sabotaged(evaluate_candidate, monkeypatch, sandbox)
    assert_accepted(verdict, sandbox)
    busy = [w for w in windows if w.foreign_share() > FOREIGN_SHARE_MAX]
    if busy:
        pytest.skip("host busy with other processes while the baselines were timed (no comparison "
                    "possible): " + "; ".join(w.describe() for w in busy))
    honest = honest_timed(sandbox, tmp_path_factory)
    # Two spinners on a two-core runner would slow an OpenMP eager baseline several-fold.
    assert verdict.eager_us < 2.5 * honest.eager_us, (
        f"eager {verdict.eager_us:.0f} us sabotaged vs {honest.eager_us:.0f} us honest on a quiet host; "
        "baseline windows: " + "; ".join(w.describe() for w in windows))


# --- the reply channel ------------------------------------------------------------------------------
@pytest.mark.parametrize("sandbox", BOTH)
def test_forged_replies_from_python(evaluate_candidate, sandbox):
    verdict = dynamic(evaluate_candidate, forge_python(), sandbox, stop_after="verify")
    assert_refused(verdict)
    assert "50.00x" not in verdict.reason


@pytest.mark.parametrize("sandbox", BOTH)
def test_forged_replies_from_cpp(evaluate_candidate, sandbox):
    _, forward, init = FORGE_CPP
    verdict = dynamic(evaluate_candidate, attack_candidate_source(forward, init=init), sandbox, stop_after="verify")
    assert_refused(verdict)
    assert "50.00x" not in verdict.reason


@pytest.mark.parametrize("sandbox", BOTH)
def test_reply_channel_rewritten_in_process(evaluate_candidate, sandbox):
    verdict = dynamic(evaluate_candidate, candidate_source(HONEST_FORWARD, init=REPLY_REWRITE_INIT), sandbox, **TIMED)
    assert_judge_figure_stands(verdict)


@pytest.mark.parametrize("sandbox", BOTH)
def test_job_file_discovery_and_problem_tampering(evaluate_candidate, sandbox):
    """The rewritten problem file makes the timed calls (all but the first) cheap; the judge's
    clock over a back-to-back batch (real inputs) disagrees. audit_every=1000: random output
    checks of timed calls (which would also catch it) almost never happen."""
    verdict = dynamic(evaluate_candidate, job_file_discovery(), sandbox, audit_every=1000, **TIMED)
    if sandbox == "bwrap":  # the box's copies of the problem and candidate are read-only there
        assert_refused(verdict, stage="build")
        assert "Read-only file system" in verdict.reason, verdict.reason
    else:  # and they are copied afresh for every start of the candidate's process
        assert_no_false_speedup(verdict, OUTER_CLOCK, "wrong answer for its own inputs")


# --- clocks -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("sandbox", BOTH)
def test_proc_self_mem_timer_rewrite(evaluate_candidate, sandbox):
    """time.perf_counter keeps its identity (the worker's check passes) but runs 100x slow."""
    verdict = dynamic(evaluate_candidate, proc_self_mem(), sandbox, **TIMED)
    assert_judge_figure_stands(verdict)


@pytest.mark.parametrize("sandbox", BOTH)
def test_native_timer_hijack(evaluate_candidate, sandbox):
    """The C function behind time.perf_counter replaced from C++: only the judge's clock sees it."""
    source = attack_candidate_source(HONEST_FORWARD, init=HIJACK_INIT)
    verdict = dynamic(evaluate_candidate, source, sandbox, **TIMED)
    assert_judge_figure_stands(verdict)


@pytest.mark.parametrize("sandbox", BOTH)
def test_native_timer_hijack_with_batch_memo(evaluate_candidate, sandbox):
    """Memoising on repeated inputs does not help: every call of a back-to-back batch sees
    different data (one element changed per call), so the judge's clock sees the real cost."""
    source = attack_candidate_source(MEMO_FORWARD, init=MEMO_INIT + HIJACK_INIT)
    verdict = dynamic(evaluate_candidate, source, sandbox, **TIMED)
    assert_no_false_speedup(verdict, OUTER_CLOCK, "wrong answer", "the candidate's process reported")


# --- secrets ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sandbox", BOTH)
def test_key_into_file_and_output(evaluate_candidate, api_key, tmp_path, sandbox):
    """The candidate's environment is scrubbed: no key to write to a file (outside its box or in
    the shared build cache) or to encode into its output, which stays right."""
    cache_file = Path(os.environ["KCODER_CACHE"]) / f"stolen-{secrets.token_hex(4)}.txt"
    try:
        verdict = dynamic(evaluate_candidate, key_to_file_and_output([str(tmp_path / "stolen.txt"), str(cache_file)]),
                          sandbox, stop_after="verify")
        assert api_key not in as_json(verdict)
        assert_accepted(verdict, sandbox)  # a found key would have changed the output
        written = [p for p in [*tmp_path.rglob("*"), cache_file] if p.is_file()]
        assert not any(api_key in p.read_text(errors="replace") for p in written)
    finally:
        cache_file.unlink(missing_ok=True)


@pytest.mark.parametrize("sandbox", BOTH)
def test_key_into_reason_and_log(evaluate_candidate, api_key, sandbox):
    verdict = dynamic(evaluate_candidate, key_to_reason(), sandbox, stop_after="verify")
    assert_refused(verdict, stage="verify")
    assert "stolen key: ''" in verdict.reason, verdict.reason  # it ran, and found nothing
    assert api_key not in as_json(verdict)


JUDGE_SCRIPT = """
import json, sys
from pathlib import Path
from helpers import PROBLEMS, fast_options
from kcoder.evaluate import evaluate
options = fast_options(sandbox=sys.argv[2], static_checks=False, stop_after="build")
print(json.dumps(evaluate(PROBLEMS / "scale_add.py", Path(sys.argv[1]), options).to_dict()))
"""


@pytest.mark.parametrize("sandbox", [
    "bwrap",
    pytest.param("none", marks=pytest.mark.xfail(strict=True, reason=(
        "--sandbox none: the candidate reads the judge's initial environment in /proc/<ppid>/environ "
        "(same user), writes the key outside its box and puts it, reversed, into the reason"))),
])
def test_key_from_the_judges_environment(tmp_path, sandbox):
    """As in real use, the key is in the judge's environment from its start (a subprocess here),
    so it is in /proc/<judge>/environ; the candidate looks through every process it can see."""
    key = f"sk-test-{secrets.token_hex(16)}"
    target = tmp_path / "stolen.txt"
    candidate = tmp_path / "model_new.py"
    candidate.write_text(key_from_other_processes(str(target)))
    env = dict(os.environ, **{KEY_VAR: key}, PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), str(ROOT)]))
    proc = subprocess.run([sys.executable, "-c", JUDGE_SCRIPT, str(candidate), sandbox], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = proc.stdout.strip().splitlines()[-1]
    verdict = json.loads(text)
    print(f"verdict ({sandbox}): {verdict['status']}, reward {verdict['reward']}: {verdict['reason']}")
    assert verdict["status"] == "rejected" and verdict["stage"] == "build", text
    assert "stolen key:" in verdict["reason"], text
    assert key not in text, "the key is in the verdict"
    assert not (target.exists() and key in target.read_text()), "the key was written outside the box"
    assert key[::-1] not in text, "the key, reversed, is in the verdict"


# --- files, network, processes ---------------------------------------------------------------------
@pytest.fixture
def outside(tmp_path):
    """Places outside the candidate's box: a folder in the test's tmp_path (bwrap gives the
    candidate a private /tmp), one under /var/tmp (bwrap's read-only root), and file names in
    the real home (bwrap puts a tmpfs over it); plus a secret file in the real home."""
    nonce = secrets.token_hex(4)
    dirs = [tmp_path / "outside"]
    dirs[0].mkdir()
    if os.access("/var/tmp", os.W_OK):
        dirs.append(Path(tempfile.mkdtemp(prefix="kcoder-redteam-", dir="/var/tmp")))
    home = Path(os.path.expanduser("~"))
    home_files = [home / f".kcoder-redteam-{nonce}-{how}.txt" for how in ("pathlib", "os", "fopen")]
    secret = home / f".kcoder-redteam-{nonce}-secret.txt"
    secret.write_text("sk-test-" + nonce)
    try:
        yield dirs, home_files, secret
    finally:
        secret.unlink()
        for path in home_files:
            path.unlink(missing_ok=True)
        for folder in dirs[1:]:
            for path in folder.iterdir():
                path.unlink()
            folder.rmdir()


def test_files_outside_the_box(evaluate_candidate, outside):
    """pathlib, os and C++ fopen write to each place outside the box: nothing lands there. It
    also tries to read a secret file in the real home, and raises if it can."""
    dirs, home_files, secret = outside
    targets = {how: [str(d / f"{how}.txt") for d in dirs] for how in ("pathlib", "os", "fopen")}
    for path in home_files:
        targets[path.stem.rsplit("-", 1)[1]].append(str(path))
    read = f"""try:
    with open({str(secret)!r}) as fh:
        found = fh.read()
except OSError:
    found = ""
if found:
    raise RuntimeError("read the real home: " + found)"""
    init = "\n".join([read, write_pathlib(targets["pathlib"]), write_os(targets["os"]), write_fopen(targets["fopen"])])
    verdict = dynamic(evaluate_candidate, attack_candidate_source(HONEST_FORWARD, init=init), "bwrap",
                      stop_after="verify")
    assert_accepted(verdict, "bwrap")  # it read nothing from the real home
    assert not [p for d in dirs for p in d.iterdir()]
    assert not [p for p in home_files if p.exists()]


@pytest.fixture
def tcp_server():
    """A TCP server on 127.0.0.1 that records what every connection sends."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    received: list[bytes] = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    received.append(conn.recv(100))
                except OSError:
                    received.append(b"")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], received
    stop.set()
    thread.join()
    server.close()


def test_network_connect(evaluate_candidate, tcp_server):
    port, received = tcp_server
    init = f"self.connect_errno = _ext.connect_to({port})"
    verdict = dynamic(evaluate_candidate, attack_candidate_source(HONEST_FORWARD, init=init), "bwrap",
                      stop_after="verify")
    assert_accepted(verdict, "bwrap")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as probe:  # the server did listen
        probe.sendall(b"probe")
    deadline = time.monotonic() + 5
    while not received and time.monotonic() < deadline:
        time.sleep(0.05)
    assert received == [b"probe"], received


@pytest.mark.parametrize("sandbox", BOTH)
def test_setsid_daemon(evaluate_candidate, sandbox):
    name = unique_name()
    init = f"_ext.start_daemon({name!r}, 0, False)"
    verdict = dynamic(evaluate_candidate, attack_candidate_source(HONEST_FORWARD, init=init), sandbox,
                      stop_after="verify")
    assert not survivors(name), "the daemon outlived the evaluation"
    assert_accepted(verdict, sandbox)


@pytest.mark.parametrize("sandbox", [
    "bwrap",
    "none",  # the subreaper (kcoder.evaluate.reaper) finds it without the marker
])
def test_setsid_daemon_that_hides_its_marker(evaluate_candidate, sandbox):
    """It wipes its environment (the marker), then spins once the candidate's process is gone."""
    name = unique_name()
    init = f"_ext.start_daemon({name!r}, 2, True)"
    verdict = dynamic(evaluate_candidate, attack_candidate_source(HONEST_FORWARD, init=init), sandbox,
                      stop_after="verify")
    assert not survivors(name), "the daemon outlived the evaluation"
    assert_accepted(verdict, sandbox)


@pytest.mark.parametrize("sandbox", BOTH)
def test_fork_through_a_function_pointer(evaluate_candidate, sandbox):
    pointer, looked_up = unique_name(), unique_name()
    init = f"_ext.fork_via_pointer({pointer!r}, False)\n_ext.fork_via_pointer({looked_up!r}, True)"
    verdict = dynamic(evaluate_candidate, attack_candidate_source(HONEST_FORWARD, init=init), sandbox,
                      stop_after="verify")
    assert not survivors(pointer, looked_up), "a forked child outlived the evaluation"
    assert_accepted(verdict, sandbox)


def test_attack_functions_are_all_exercised():
    """Every native attack in ATTACK_CPP is used by some test of this file."""
    text = Path(__file__).read_text()
    assert all(f"_ext.{name}(" in text for name in ATTACK_FUNCTIONS if name != "scale_add_relu")
