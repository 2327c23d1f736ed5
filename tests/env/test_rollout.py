"""kcoder rollout: episodes written as chat-format JSONL. A scripted model on the tests' local
OpenAI-compatible server with the fake judge (fast), and the built-in policy through the CLI
with the real judge (slow)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from agent.fakes import FakeEvaluator
from agent.llm_server import call, reply
from helpers import PROBLEMS, run_kcoder

from kcoder.env.episode import run_spec
from kcoder.env.rollout import run_rollout
from kcoder.settings import Settings

POLICY_PROBLEMS = Path(__file__).parents[1] / "policy" / "problems"


def check_episode(path: Path) -> dict:
    """One line; the conversation is well formed: every tool call answered by its id."""
    lines = path.read_text().splitlines()
    assert len(lines) == 1
    ep = json.loads(lines[0])
    roles = [m["role"] for m in ep["messages"]]
    assert roles[:2] == ["system", "user"] and "assistant" in roles
    calls = [tc["id"] for m in ep["messages"] if m["role"] == "assistant" for tc in m.get("tool_calls") or []]
    answers = [m["tool_call_id"] for m in ep["messages"] if m["role"] == "tool"]
    assert calls == answers and calls
    for m in ep["messages"]:
        for tc in m.get("tool_calls") or []:
            assert tc["type"] == "function" and isinstance(json.loads(tc["function"]["arguments"]), dict)
    assert len(ep["rewards"]) == roles.count("assistant") == len(ep["steps"])
    assert {t["function"]["name"] for t in ep["tools"]} >= {"write_file", "verify", "finish"}
    return ep


def test_scripted_model_three_problems(scripted, tmp_path, monkeypatch):
    monkeypatch.setenv("KCODER_API_KEY", "test")  # what kcoder sends to an --api-base server
    problems = []
    for name in ("alpha", "beta", "gamma"):
        problems.append(tmp_path / "probs" / f"{name}.py")
        problems[-1].parent.mkdir(exist_ok=True)
        shutil.copyfile(PROBLEMS / "scale_add.py", problems[-1])
    script = [reply("Writing.", call("write_file", path="model_new.py", content="# relu kernel\n")),
              reply("Check it.", call("verify")), reply("Done.", call("finish", summary="ok"))]
    server = scripted(script * 3)
    settings = Settings(device="cpu", api_base=server.base_url, tool_call="native", max_turns=10, preflight=False)
    out = tmp_path / "out"
    lines = run_rollout([str(p) for p in problems], settings, policy="openai/scripted", episodes=1, out_dir=out,
                        execute=lambda spec, slot: run_spec(spec, evaluate=FakeEvaluator()))
    assert sorted(line["name"] for line in lines) == ["alpha-000", "beta-000", "gamma-000"]
    for name in ("alpha", "beta", "gamma"):
        ep = check_episode(out / "episodes" / f"{name}-000.jsonl")
        assert ep["rewards"] == [0.0, 1.0, 1.0] and ep["reward"] == 1.0 and ep["status"] == "finished"
        assert ep["verdict"]["correct"] and ep["verdict"]["candidate_us"] is not None  # timed at the end
        assert ep["policy"] == "openai/scripted" and ep["usage"]["calls"] == 3
    index = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert len(index) == 3 and all("messages" not in line for line in index)
    assert json.loads((out / "rollout.json").read_text())["episodes"] == 1


def test_bad_usage_exits_2(tmp_path):
    proc = run_kcoder("rollout", str(PROBLEMS / "scale_add.py"), "--device", "cpu", "--out", str(tmp_path))
    assert proc.returncode == 2 and "--model MODEL or --policy builtin" in proc.stderr
    proc = run_kcoder("rollout", str(tmp_path / "missing.py"), "--policy", "builtin", "--device", "cpu")
    assert proc.returncode == 2 and "missing.py" in proc.stderr


@pytest.mark.slow
def test_builtin_policy_rollout_through_the_cli(tmp_path):
    out = tmp_path / "out"
    problems = [PROBLEMS / "scale_add.py", POLICY_PROBLEMS / "sort.py"]  # one episode that ends, one refused
    proc = run_kcoder("rollout", *map(str, problems), "--policy", "builtin", "--device", "cpu", "--tune-trials", "1",
                      "--no-compile", "--budget", "0.3", "--max-turns", "6", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    episodes = {p.stem: check_episode(p) for p in (out / "episodes").glob("*.jsonl")}
    assert sorted(episodes) == ["scale_add-000", "sort-000"]
    ep = episodes["scale_add-000"]
    assert ep["reward"] >= 1 and ep["verdict"]["correct"] and ep["status"] == "finished", ep["message"]
    tools = [tc["function"]["name"] for m in ep["messages"] for tc in m.get("tool_calls") or []]
    assert tools == ["write_file", "verify", "tune", "finish"]
    sort = episodes["sort-000"]
    assert sort["reward"] == 0 and sort["verdict"] is None and "aten.sort" in sort["messages"][2]["content"]
