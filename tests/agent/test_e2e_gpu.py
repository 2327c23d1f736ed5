"""The scripted end-to-end run on the cuda target (GPU machine; marker `gpu`)."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console
from sources import cuda_candidate_source

from kcoder.agent.optimize import optimize
from kcoder.evaluate.options import EvalOptions
from kcoder.settings import Settings
from kcoder.ui import Output

from .llm_server import call, reply

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

GOOD = cuda_candidate_source("return _ext.scale_add_relu(x, y, self.scale)")
LAZY = cuda_candidate_source("return _ext.never_launched(x, y, self.scale)")


def test_scripted_run_on_cuda(scripted, problem, tmp_path, api_key):
    server = scripted([
        reply("Workflow first.", call("load_skill", name="optimize-workflow")),
        reply("Write a kernel.", call("write_file", path="model_new.py", content=LAZY)),
        reply("Verify.", call("verify")),
        reply("The kernel never ran.", call("edit_file", path="model_new.py",
                                            old_string="_ext.never_launched(",
                                            new_string="_ext.scale_add_relu(")),
        reply("Measure.", call("benchmark")),
        reply("Done.", call("finish")),
    ])
    out = io.StringIO()
    settings = Settings.from_eval_options(
        EvalOptions(device="cuda", timing_budget_s=1.0, min_rounds=20), model="openai/scripted",
        api_base=server.base_url, target=0.01, max_turns=20, runs_dir=tmp_path / "runs", tool_call="native")
    code = optimize(problem, settings, Output(Console(file=out, width=120)))
    run_dir = sorted((tmp_path / "runs").glob("*"))[-1]
    report = json.loads((run_dir / "report.json").read_text())
    assert "FAILED verify" in server.requests[3]["messages"][-1]["content"]
    assert code == 0 and report["status"] == "target_reached", report["message"]
    best = report["best"]
    assert best["device"] == "cuda" and best["correct"] and best["stage"] == "done"
    assert (run_dir / "best" / "model_new.py").read_text() == GOOD
    assert best["plain_build"] == "verified"  # built again exactly as plain load_inline builds it
    print(f"\nAGENT-CUDA {best['device_name']}: {best['speedup_vs_eager']:.2f}x vs eager, "
          f"{best['speedup_vs_compile']:.2f}x vs compile, reward {best['reward']}")
