"""Code kcoder did not write runs confined on every path, not only in the evaluator's candidate
process: `kcoder profile` (its target imports the candidate), tune's resource step, an
evaluation through MCP, and a problem file an MCP client names (the reference process).

The hostile file writes a marker into $HOME and reads OPENAI_API_KEY when imported, and writes
what it saw into a report folder of the test's (bound writable into every sandbox by the
fixture, so the test can read it back; kcoder's cache is read-only there). Confined, it leaves no marker in the
user's HOME, sees no key, and its HOME is a private folder. Every case runs with bwrap (where
it works here) and with `--sandbox none` (scrubbed environment and private HOME only). No
extension is built: the files are plain Python.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from helpers import PROBLEMS

from kcoder.evaluate import sandbox
from kcoder.evaluate.sandbox import bwrap_usable

SECRET = "sk-kcoder-test-secret-0123456789"
MODES = ["none", pytest.param("bwrap", marks=pytest.mark.skipif(not bwrap_usable(), reason="bwrap unusable"))]

SPY = '''import os
import pathlib

_HOME = os.environ.get("HOME", "")
try:
    pathlib.Path(_HOME, "kcoder-marker-{nonce}").write_text("was here")
except OSError:
    pass
with open(pathlib.Path({seen_dir!r}, "seen-{nonce}.txt"), "a") as _fh:
    _fh.write(f"{{__name__}}|{{os.environ.get('OPENAI_API_KEY')!r}}|{{_HOME}}\\n")
'''

CANDIDATE = '''import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return x
'''


@pytest.fixture
def spy(tmp_path, monkeypatch):
    """A fake user HOME, a secret in the environment, and the reader of what the spy saw."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    nonce = uuid.uuid4().hex
    seen_dir = tmp_path / "seen"
    seen_dir.mkdir()
    seen = seen_dir / f"seen-{nonce}.txt"
    plain_bwrap_argv = sandbox.bwrap_argv

    def with_report_folder(*args, **kwargs):
        argv = plain_bwrap_argv(*args, **kwargs)
        return argv[:-2] + ["--bind", str(seen_dir), str(seen_dir)] + argv[-2:]  # before --chdir

    monkeypatch.setattr(sandbox, "bwrap_argv", with_report_folder)

    def lines() -> list[tuple[str, str, str]]:
        assert not (home / f"kcoder-marker-{nonce}").exists(), "the spy wrote into the user's HOME"
        assert seen.is_file(), "the spy never ran: the test shows nothing"
        rows = [tuple(line.split("|")) for line in seen.read_text().splitlines()]
        for _name, key, spy_home in rows:
            assert key == "None" and SECRET not in key
            assert Path(spy_home) != home and spy_home
        return rows

    return SPY.format(nonce=nonce, seen_dir=str(seen_dir)), lines, tmp_path


def _files(tmp_path: Path, spy_source: str, spy_in: str) -> tuple[Path, Path]:
    problem = tmp_path / "problem.py"
    problem_text = (PROBLEMS / "scale_add.py").read_text()
    problem.write_text(spy_source + problem_text if spy_in == "problem" else problem_text)
    candidate = tmp_path / "model_new.py"
    candidate.write_text(spy_source + CANDIDATE if spy_in == "candidate" else CANDIDATE)
    return problem, candidate


@pytest.mark.parametrize("mode", MODES)
def test_profile_imports_the_candidate_confined(spy, mode):
    from kcoder.profile.options import ProfileOptions
    from kcoder.profile.profiler import profile_candidate

    source, lines, tmp_path = spy
    problem, candidate = _files(tmp_path, source, "candidate")
    profile_candidate(problem, candidate, ProfileOptions(sandbox=mode, calibrate=False))
    assert {name for name, _, _ in lines()} == {"kcoder_candidate"}


@pytest.mark.parametrize("mode", MODES)
def test_tune_resource_step_imports_the_point_confined(spy, mode):
    from kcoder.tune.resources import point_resources

    source, lines, tmp_path = spy
    problem, candidate = _files(tmp_path, source, "candidate")
    assert point_resources(problem, candidate, "sm_90", mode) == {}  # no CUDA extension: no columns
    assert {name for name, _, _ in lines()} == {"kcoder_candidate"}


def _mcp_eval(tmp_path: Path, problem: Path, candidate: Path, mode: str) -> dict:
    from kcoder.evaluate.options import EvalOptions
    from kcoder.mcp.actions import CandidateRef, ServerState, evaluate_call
    from kcoder.mcp.confine import Confinement
    from kcoder.mcp.reports import RunIndex
    from kcoder.settings import Settings

    # static checks off: they would refuse the spy's file writes before it ever ran
    settings = Settings(device="cpu", sandbox=mode, eval_base=EvalOptions(static_checks=False))
    state = ServerState(settings, Confinement(tmp_path), RunIndex(tmp_path))
    return evaluate_call(state, problem.name, CandidateRef(path=candidate.name), "build", None, True, lambda _: None)


@pytest.mark.parametrize("mode", MODES)
def test_mcp_eval_runs_the_candidate_confined(spy, mode):
    source, lines, tmp_path = spy
    problem, candidate = _files(tmp_path, source, "candidate")
    result = _mcp_eval(tmp_path, problem, candidate, mode)
    assert result["verdict"]["compiled"], result["verdict"]["reason"]
    assert {name for name, _, _ in lines()} == {"kcoder_candidate"}


@pytest.mark.parametrize("mode", MODES)
def test_mcp_named_problem_runs_confined_in_the_reference_process(spy, mode):
    source, lines, tmp_path = spy
    problem, candidate = _files(tmp_path, source, "problem")
    result = _mcp_eval(tmp_path, problem, candidate, mode)
    assert result["verdict"]["compiled"], result["verdict"]["reason"]
    # the reference process imported it (and the candidate's process, for get_inputs): both confined
    assert {name for name, _, _ in lines()} == {"kcoder_reference_problem", "kcoder_problem_inputs"}


def test_a_users_own_eval_keeps_the_reference_unconfined(spy):
    """The contrast that shows the test above measures something: outside MCP, the user's own
    problem runs in the reference process with the user's HOME (credentials are still dropped)."""
    from kcoder.evaluate import evaluate
    from kcoder.evaluate.options import EvalOptions

    source, _lines, tmp_path = spy
    problem, candidate = _files(tmp_path, source, "problem")
    verdict = evaluate(problem, candidate, EvalOptions(device="cpu", stop_after="build", sandbox="none",
                                                       static_checks=False))
    assert verdict.compiled, verdict.reason
    home = Path(os.environ["HOME"])
    assert list(home.glob("kcoder-marker-*")), "the user's own reference process sees the user's HOME"


def test_optimize_for_an_mcp_client_confines_the_problem(spy, monkeypatch):
    """`kcoder mcp` starts optimize runs with KCODER_CONFINE_PROBLEM=1: their evaluations'
    reference processes and the built-in policy's graph capture run the problem confined."""
    from kcoder.evaluate.options import CONFINE_PROBLEM_ENV, EvalOptions
    from kcoder.policy.capture import capture_graph

    source, lines, tmp_path = spy
    problem, _candidate = _files(tmp_path, source, "problem")
    assert not EvalOptions().confine_problem
    monkeypatch.setenv(CONFINE_PROBLEM_ENV, "1")
    assert EvalOptions().confine_problem
    graph = capture_graph(problem, tmp_path / "capture")
    assert graph and len(lines()) == 1


FAKE_NVCC = """#!/bin/sh
touch "$HOME/kcoder-marker-{nonce}"
echo "nvcc|${{OPENAI_API_KEY:-None}}|$HOME" >> "{seen_dir}/seen-{nonce}.txt"
"""


@pytest.mark.parametrize("mode", MODES)
def test_ptxas_report_runs_the_build_files_command_confined(spy, mode):
    """The resource report re-runs the nvcc line of a build.ninja in the build cache, which a
    candidate's process can write: that command runs confined too, as --sandbox says."""
    from kcoder.profile.ptxas import compile_report

    source, lines, tmp_path = spy
    nonce = source.split("kcoder-marker-")[1].split('"')[0]
    build = Path(os.environ["KCODER_CACHE"]) / f"fake-build-{nonce}"  # where a candidate can write
    build.mkdir()
    nvcc = build / "nvcc.sh"
    nvcc.write_text(FAKE_NVCC.format(nonce=nonce, seen_dir=tmp_path / "seen"))
    nvcc.chmod(0o755)
    (build / "cuda.cu").write_text(f"// {nonce}\n")
    (build / "build.ninja").write_text(f"nvcc = {nvcc}\ncuda_cflags = -O2\n"
                                       f"build cuda.cuda.o: cuda_compile {build / 'cuda.cu'}\n")
    compile_report(build, 60.0, sandbox=mode)
    assert [name for name, _, _ in lines()] == ["nvcc"]


def test_build_dirs_a_target_reports_stay_inside_the_build_cache(tmp_path):
    """The prepare step's report is the target's writing; the ptxas step reads (and binds into
    its sandbox) the folders it names, so only folders in kcoder's build cache pass."""
    from kcoder.paths import cache_root
    from kcoder.profile.targetbox import build_dirs

    inside = cache_root() / "build" / "ext-0123"
    prep = {"builds": [{"cuda": True, "dir": str(Path.home() / ".ssh"), "ok": True},
                       {"cuda": True, "dir": str(cache_root() / "build" / ".." / ".." / "elsewhere"), "ok": True},
                       {"cuda": True, "dir": str(inside), "ok": False}, "not a dict"]}
    assert build_dirs(prep) == [inside.resolve()] and build_dirs(prep, ok_only=True) == []
