"""The evaluator end to end on the cpu target, with real load_inline builds.

All working candidates embed tests/sources.py:TESTLIB_CPP, so one build serves them all.
"""

import os

import pytest
from helpers import PROBLEMS, run_json
from sources import BROKEN_CPP, candidate_source

pytestmark = pytest.mark.slow

GOOD = candidate_source("return _ext.scale_add_relu(x, y, self.scale)")


def test_correct_candidate_is_accepted_with_timing(write_candidate):
    path = write_candidate(GOOD)
    code, v = run_json("eval", str(PROBLEMS / "scale_add.py"), str(path), "--device", "cpu",
                       "--budget", "0.3")
    assert code == 0, v["reason"]
    assert v["correct"] and v["compiled"] and v["stage"] == "done"
    assert v["reward"] >= 1
    assert v["n_input_sets"] >= 5 and v["timing_rounds"] >= 5  # the judge's clock's samples
    assert v["eager_us"] > 0 and v["compile_us"] > 0 and v["candidate_us"] > 0
    assert v["speedup_vs_eager"] == pytest.approx(v["eager_us"] / v["candidate_us"])
    lo, hi = v["speedup_vs_compile_ci"]
    assert lo <= v["speedup_vs_compile"] <= hi
    assert v["max_abs_err"] == 0.0 and v["torch_version"]


def test_unchanged_candidate_does_not_rebuild(evaluate_candidate):
    first = evaluate_candidate(GOOD, stop_after="verify")
    second = evaluate_candidate(GOOD, stop_after="verify")
    assert first.correct and second.correct
    assert any("cached" in note for note in second.notes), second.notes
    assert second.seconds["build"] < 1.0


def test_wrong_answer_is_rejected(write_candidate):
    path = write_candidate(candidate_source("return _ext.no_relu(x, y, self.scale)"))
    code, v = run_json("eval", str(PROBLEMS / "scale_add.py"), str(path), "--device", "cpu")
    assert code == 1
    assert v["stage"] == "verify" and v["reward"] == -1
    assert v["reason"].startswith("wrong answer on input set 1")


def test_compile_error_reports_file_and_line(write_candidate):
    source = GOOD.replace(repr(candidate_source.__globals__["TESTLIB_CPP"]), repr(BROKEN_CPP))
    source = source.replace('name="kcoder_testlib"', 'name="kcoder_broken"')
    source = source.replace("functions=" + repr(candidate_source.__globals__["TESTLIB_FUNCTIONS"]),
                            "functions=['scale_add_relu']")
    path = write_candidate(source)
    code, v = run_json("eval", str(PROBLEMS / "scale_add.py"), str(path), "--device", "cpu")
    assert code == 1
    assert v["stage"] == "build" and not v["compiled"]
    assert v["reason"].startswith("cpp_sources:")
    # BROKEN_CPP's missing semicolon follows line 5 of the candidate's own cpp source
    assert "cpp_sources:" in v["log"] and "error" in v["log"]
    assert len(v["log"].splitlines()) <= 31
    assert "-I" not in v["log"]  # compiler command lines are trimmed away


@pytest.mark.parametrize("call, expected", [
    ("_ext.segfault_now()", "segmentation fault (SIGSEGV)"),
    ("_ext.abort_now()", "abort (SIGABRT)"),
])
def test_crashes_become_verdicts(evaluate_candidate, call, expected):
    verdict = evaluate_candidate(candidate_source(f"{call}\nreturn x"))
    assert not verdict.correct and verdict.stage == "verify"
    assert expected in verdict.reason
    assert "model_new.py" in verdict.reason  # faulthandler's frame names the candidate line


def test_hang_is_killed_at_its_limit(evaluate_candidate):
    import time

    started = time.monotonic()
    verdict = evaluate_candidate(candidate_source("_ext.spin_forever()\nreturn x"), verify_timeout_s=4)
    assert time.monotonic() - started < 60
    assert verdict.stage == "verify" and "timeout" in verdict.reason and "4 s" in verdict.reason


def test_python_exception_names_candidate_line(evaluate_candidate):
    verdict = evaluate_candidate(candidate_source("n = x.shape[0] // 0\nreturn x"))
    assert verdict.stage == "verify"
    assert "ZeroDivisionError" in verdict.reason and "model_new.py:" in verdict.reason


def test_exception_at_import_is_a_build_failure(evaluate_candidate):
    verdict = evaluate_candidate("import torch\nraise RuntimeError('no kernel today')\n"
                                 "class ModelNew(torch.nn.Module):\n    pass\n")
    assert verdict.stage == "build" and "no kernel today" in verdict.reason


def test_worker_process_group_is_gone_after_timeout(evaluate_candidate, tmp_path):
    verdict = evaluate_candidate(candidate_source("_ext.spin_forever()\nreturn x"), verify_timeout_s=3)
    assert "timeout" in verdict.reason
    # The worker ran with cwd = the candidate's folder; nothing may still run there.
    survivors = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd") == str(tmp_path):
                survivors.append(pid)
        except OSError:
            continue
    assert survivors == []
