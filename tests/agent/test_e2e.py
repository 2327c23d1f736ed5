"""End to end on the cpu target: scripted model -> real litellm -> real tools -> real harness.

Candidates reuse tests/sources.py so the C++ build is shared with the rest of the suite.
The testlib kernel is not faster than torch.compile on CPU, so acceptance runs use a low
--target: what is tested is that the evaluator's timed verdict, not the model, ends the run.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from sources import BROKEN_CPP, testlib_candidate

from kcoder.agent.optimize import optimize
from kcoder.evaluate.options import EvalOptions
from kcoder.settings import Settings
from kcoder.ui import Output

from .llm_server import call, reply

GOOD = testlib_candidate("return _ext.scale_add_relu(x, y, self.scale)")
WRONG = testlib_candidate("return _ext.no_relu(x, y, self.scale)")
BROKEN = f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_ext = load_inline(
    name="kcoder_broken",
    cpp_sources=[{BROKEN_CPP!r}],
    functions=["scale_add_relu"],
    extra_cflags=["-O2"],
)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return _ext.scale_add_relu(x, y, self.scale)
'''
FAST_TIMING = EvalOptions(device="cpu", timing_budget_s=1.0, min_rounds=5, warmup=2)
LOW_TARGET = 0.01  # any correct, timed candidate reaches it

pytestmark = pytest.mark.slow


def run_opt(problem: Path, server: Any, tmp_path: Path, **kw: Any) -> tuple[int, Path]:
    """optimize() with test defaults (`kw`: Settings fields); returns (exit code, run dir)."""
    fields: dict[str, Any] = dict(
        model="openai/scripted", api_base=server.base_url, target=LOW_TARGET, max_turns=30,
        runs_dir=tmp_path / "runs", tool_call="native", preflight=False)  # tests/suite/test_preflight.py
    settings = Settings.from_eval_options(FAST_TIMING, **{**fields, **kw})
    code = optimize(problem, settings, Output(Console(file=io.StringIO(), width=120)))
    run_dir = settings.resume or sorted((tmp_path / "runs").glob("*"))[-1]
    return code, run_dir


def write(source: str) -> dict[str, Any]:
    return reply("Writing model_new.py.", call("write_file", path="model_new.py", content=source))


def last_observation(server: Any, request: int) -> str:
    return server.requests[request]["messages"][-1]["content"]


def report_of(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "report.json").read_text())


def test_compile_error_then_wrong_then_accepted(scripted, problem, tmp_path, api_key):
    server = scripted([
        reply("Start with the workflow.", call("load_skill", name="optimize-workflow")),
        reply("Read the reference.", call("read_file", path="model.py")),
        write(BROKEN),
        reply("Compile it.", call("compile")),
        write(WRONG),
        reply("Verify.", call("verify")),
        reply("The relu is missing.", call("edit_file", path="model_new.py",
                                           old_string="_ext.no_relu(",
                                           new_string="_ext.scale_add_relu(")),
        reply("Verify again.", call("verify")),
        reply("Measure.", call("benchmark")),
        reply("Done.", call("finish")),
    ])
    code, run_dir = run_opt(problem, server, tmp_path)
    assert "Optimize a PyTorch module" in last_observation(server, 1)
    assert "class Model" in last_observation(server, 2)
    assert "FAILED build" in last_observation(server, 4)
    assert "error" in last_observation(server, 4).lower()
    assert "FAILED verify" in last_observation(server, 6)
    assert "PASSED verify" in last_observation(server, 8)
    report = report_of(run_dir)
    assert code == 0 and report["status"] == "target_reached", report["message"]
    assert server.remaining == 1  # the verdict ended the run; finish was never needed
    assert report["best"]["correct"] and report["best"]["speedup_vs_compile"] is not None
    assert (run_dir / "best" / "model_new.py").read_text() == GOOD
    assert report["best"]["plain_build"] == "verified"  # rebuilt exactly as plain load_inline builds it
    assert report["candidates_evaluated"] == 3  # broken, wrong, fixed
    assert (run_dir / "report.md").is_file()


def test_turn_limit_keeps_best_and_report(scripted, problem, tmp_path, api_key):
    server = scripted([write(GOOD), reply("", call("verify")), write(WRONG),
                       reply("", call("verify"))])
    code, run_dir = run_opt(problem, server, tmp_path, max_turns=3, target=1.05)
    report = report_of(run_dir)
    assert code == 0 and report["status"] == "turn_limit"
    assert (run_dir / "best" / "model_new.py").read_text() == GOOD
    assert report["best"]["candidate_us"] is not None  # timed once for the report
    assert "Best verified candidate" in (run_dir / "report.md").read_text()


def test_resume_finishes_the_job(scripted, problem, tmp_path, api_key):
    first = scripted([write(WRONG), reply("", call("verify"))])
    code, run_dir = run_opt(problem, first, tmp_path, max_turns=2)
    assert code == 1 and report_of(run_dir)["best"] is None
    second = scripted([
        reply("Fix the activation.", call("edit_file", path="model_new.py",
                                          old_string="_ext.no_relu(",
                                          new_string="_ext.scale_add_relu(")),
        reply("", call("benchmark")),
    ])
    code, _ = run_opt(problem, second, tmp_path, resume=run_dir)
    report = report_of(run_dir)
    assert code == 0 and report["status"] == "target_reached" and report["turns"] == 4
    assert "FAILED verify" in json.dumps(second.requests[0]["messages"])
    assert (run_dir / "best" / "model_new.py").read_text() == GOOD
