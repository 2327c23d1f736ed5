"""Candidates of one problem judged through one EvalSession (evaluate/session.py): one
reference process for all of them, a fresh candidate process each, the same verdicts as
separate evaluations. The candidates reuse TESTLIB_CPP's build (tests/sources.py)."""

from __future__ import annotations

import pytest
from helpers import PROBLEMS, fast_options
from sources import candidate_source

from kcoder.evaluate import basecache, evaluate
from kcoder.evaluate.session import EvalSession
from kcoder.evaluate.spawn import Children

pytestmark = pytest.mark.slow  # judged evaluations (the build is the suite's TESTLIB one, cached)

GOOD = candidate_source("return _ext.scale_add_relu(x, y, self.scale)")
WRONG = candidate_source("return _ext.no_relu(x, y, self.scale)")
REFERENCE_START = ("reference_process_start", "reference_torch_import", "reference_problem_load",
                   "reference_first_call")


@pytest.fixture
def started(monkeypatch):
    """(name, pid) of every child process the judge starts."""
    seen: list[tuple[str, int]] = []
    popen = Children._popen

    def record(self, argv, env, name, cwd, share=None):
        proc = popen(self, argv, env, name, cwd, share)
        seen.append((name, proc.pid))
        return proc

    monkeypatch.setattr(Children, "_popen", record)
    return seen


def test_one_reference_process_judges_every_candidate(write_candidate, started, monkeypatch):
    monkeypatch.delenv(basecache.FRESH_ENV, raising=False)  # as in a tune run: baselines cached
    good, wrong = write_candidate(GOOD, "good.py"), write_candidate(WRONG, "wrong.py")
    options = fast_options(compile_baseline=False)
    with EvalSession(PROBLEMS / "scale_add.py", options) as session:
        first = session.evaluate(good)
        pid = session.reference_pid()
        second = session.evaluate(wrong)  # a wrong candidate after a right one
        third = session.evaluate(good)
        assert session.reference_pid() == pid and pid is not None and session.references_started == 1
    assert session.reference_pid() is None  # closed: the reference process ended
    assert first.status == "accepted" and first.candidate_us, first.reason
    assert second.status == "rejected" and second.reason.startswith("wrong answer"), second.reason
    assert third.status == "accepted" and third.candidate_us, third.reason
    refs = [p for name, p in started if name == "reference"]
    cands = [p for name, p in started if name == "candidate"]
    assert refs == [pid]
    assert len(cands) >= 3 and len(set(cands)) == len(cands)  # a fresh process per candidate (and restart)
    assert any(k in first.seconds for k in REFERENCE_START)
    for later in (second, third):
        assert not any(k in later.seconds for k in REFERENCE_START), later.seconds
        assert "reference_reset" in later.seconds
    print(f"\nCPU seconds: first {first.seconds['total']}, second {second.seconds['total']}, "
          f"third {third.seconds['total']}")


def test_session_verdicts_match_separate_evaluations(write_candidate):
    good, wrong = write_candidate(GOOD, "good.py"), write_candidate(WRONG, "wrong.py")
    options = fast_options(stop_after="verify", compile_baseline=False)
    alone = [evaluate(PROBLEMS / "scale_add.py", path, options) for path in (wrong, good)]
    with EvalSession(PROBLEMS / "scale_add.py") as session:
        shared = [session.evaluate(path, options) for path in (wrong, good)]
    assert [v.status for v in alone] == [v.status for v in shared] == ["rejected", "accepted"]
    assert [v.correct for v in shared] == [False, True]
    assert shared[0].reason.startswith("wrong answer") and alone[0].reason.startswith("wrong answer")


def test_new_settings_start_a_new_reference_process(write_candidate, started):
    good = write_candidate(GOOD, "good.py")
    with EvalSession(PROBLEMS / "scale_add.py") as session:
        a = session.evaluate(good, fast_options(stop_after="verify", seed=1))
        b = session.evaluate(good, fast_options(stop_after="verify", seed=2))  # other weights' seed
        assert session.references_started == 2
    assert a.correct and b.correct
    assert len([p for name, p in started if name == "reference"]) == 2


def test_tune_points_share_one_reference_process(tmp_path, started):
    from sources import tunable_candidate

    from kcoder.tune.engine import TuneOptions, tune

    candidate = tmp_path / "cand.py"
    candidate.write_text(tunable_candidate())
    topts = TuneOptions(strategy="exhaustive", jobs=1, use_cache=False, plain_check=False, resources=False)
    result = tune(PROBLEMS / "scale_add.py", candidate, fast_options(), topts, tmp_path / "out")
    judged = [p for p in result.points if p.status != "constraint"]
    assert sorted(p.status for p in judged) == ["incorrect", "incorrect", "ok", "ok"]
    assert all(p.config["KERNEL"] == "relu" for p in judged if p.status == "ok")
    assert len([p for name, p in started if name == "reference"]) == 1  # for every point
    assert len({p for name, p in started if name == "candidate"}) >= 4
