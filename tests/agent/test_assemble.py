"""Settings and the one place an agent is built (optimize and chat alike)."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from kcoder.agent import prompts
from kcoder.agent.assemble import build_agent
from kcoder.agent.events import short_arguments
from kcoder.evaluate.options import EvalOptions
from kcoder.settings import DEFAULT_TARGET, Settings
from kcoder.ui import Output
from kcoder.verdict import Verdict
from kcoder.workspace import Workspace

from .fakes import FakeEvaluator


def test_settings_build_the_evaluators_options():
    settings = Settings(device="cpu", allow=["gemm"], precision="relaxed", stop_after="verify", budget=1.5,
                        plain_build=True, no_compile=True)
    options = settings.eval_options()
    assert (options.device, options.allow, options.precision, options.stop_after) == (
        "cpu", ["gemm"], "relaxed", "verify")
    assert options.timing_budget_s == 1.5 and not options.fast_build and not options.compile_baseline
    tuned = EvalOptions(device="cpu", min_rounds=7, warmup=1, timing_budget_s=0.5)
    assert Settings.from_eval_options(tuned, model="m").eval_options() == tuned  # nothing lost
    assert Settings().target == DEFAULT_TARGET


@pytest.mark.parametrize(("fields", "words"), [
    ({"device": "tpu"}, "device"), ({"allow": ["blas"]}, "--allow"), ({"precision": "loose"}, "precision"),
    ({"tool_call": "smoke"}, "tool-call"), ({"target": 0.0}, "--target"), ({"max_turns": 0}, "--max-turns"),
])
def test_settings_name_the_bad_option(fields, words):
    with pytest.raises(ValueError, match=words):
        Settings(**fields).validate()


def test_optimize_and_chat_agents_differ_only_where_chat_does(problem, tmp_path, api_key):
    settings = Settings(model="openai/scripted", api_base="http://127.0.0.1:9/v1", tool_call="native",
                        target=1.3, max_turns=7)
    ws = Workspace.create(problem, runs_dir=tmp_path / "runs")
    out = Output(Console(file=io.StringIO()))
    run = build_agent(settings, ws, out, evaluate=FakeEvaluator())
    chat = build_agent(settings, ws, out, mode="chat", evaluate=FakeEvaluator())
    assert run.toolbox.names == chat.toolbox.names and "benchmark" in run.toolbox.names
    assert chat.system_prompt == run.system_prompt + "\n\n" + prompts.CHAT_NOTE
    assert "at least 1.30x as fast as torch.compile" in run.system_prompt
    assert (run.limits.target, run.limits.max_turns) == (1.3, 7)
    assert run.meta["model"] == "openai/scripted" and run.meta["tool_mode"] == "native"
    assert chat.meta["mode"] == "chat" and "mode" not in run.meta
    assert run.ctx.options == settings.eval_options()


def test_a_saved_verdict_of_an_older_run_still_loads(problem, tmp_path):
    ws = Workspace.create(problem, runs_dir=tmp_path / "runs")
    ws.best_dir.mkdir()
    (ws.best_dir / "model_new.py").write_text("# best\n")
    saved = {"correct": True, "speedup_vs_compile": 1.4, "plain_build": "verified", "retired_field": 1}
    (ws.best_dir / "verdict.json").write_text(json.dumps(saved))
    best = ws.best_verdict()
    assert isinstance(best, Verdict) and best.correct and best.speedup_vs_compile == 1.4
    assert best.plain_build == "verified"
    ws.save_best(ws.best_dir / "model_new.py", best)
    assert json.loads((ws.best_dir / "verdict.json").read_text())["plain_build"] == "verified"


def test_tool_arguments_in_one_line():
    args = json.dumps({"path": "model_new.py", "content": "line\n" * 40, "full": True})
    assert short_arguments(args) == "path='model_new.py' content=<40 lines> full=True"
    assert short_arguments("{not json") == "{not json"
