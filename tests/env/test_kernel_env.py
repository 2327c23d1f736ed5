"""KernelEnv driven by scripted actions: the fake judge for the step API's bookkeeping, the
real judge (cpu target, the shared test kernel library) for honest and cheating candidates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent.fakes import FakeEvaluator
from helpers import PROBLEMS, fast_options
from sources import candidate_source

from kcoder.agent import prompts
from kcoder.env import KernelEnv
from kcoder.env.kernel_env import _children
from kcoder.settings import Settings

GOOD = "# fused relu kernel\n"
WRONG = "# forgot the activation\n"


def write(content: str) -> dict:
    return {"name": "write_file", "arguments": {"path": "model_new.py", "content": content}}


def make_env(problem: Path, tmp_path: Path, **kw) -> KernelEnv:
    kw.setdefault("evaluate", FakeEvaluator())
    return KernelEnv(problem, device="cpu", runs_dir=tmp_path / "runs", **kw)


def test_reset_gives_the_task_and_the_tools(problem, tmp_path):
    env = make_env(problem, tmp_path)
    obs, info = env.reset(seed=3)
    assert obs == prompts.task_prompt(problem.read_text(), "cpu")
    assert {"write_file", "verify", "benchmark", "finish"} <= set(info["tool_names"])
    assert all(t["type"] == "function" for t in info["tools"]) and "kcoder" in info["system_prompt"]
    assert [m["role"] for m in env.messages] == ["system", "user"]
    start = json.loads((Path(info["run_dir"]) / "trajectory.jsonl").read_text().splitlines()[0])
    assert start["type"] == "start" and start["seed"] == 3 and start["model"] == "env"
    env.close()
    assert "```tool" not in info["system_prompt"]
    text_env = make_env(problem, tmp_path, tool_mode="text")
    assert "```tool" in text_env.reset()[1]["system_prompt"]  # the text protocol is taught
    text_env.close()


def test_scripted_episode_rewards_and_ends_at_the_target(problem, tmp_path):
    env = make_env(problem, tmp_path, max_turns=10)
    env.reset()
    obs, reward, term, trunc, info = env.step(write(GOOD))
    assert obs.startswith("wrote model_new.py") and reward == 0 and not (term or trunc)
    assert info["verdict"] is None and info["best"] is None
    obs, reward, term, trunc, info = env.step({"name": "verify", "arguments": {}})
    assert obs.startswith("PASSED verify") and reward == 1 and info["verdict"]["correct"]
    obs, reward, term, trunc, info = env.step({"name": "benchmark", "arguments": "{}"})
    assert term and not trunc and info["status"] == "target_reached" and reward == 1
    assert "Target reached" in obs and info["best"]["speedup_vs_compile"] == pytest.approx(1.2)
    report = json.loads((Path(info["run_dir"]) / "report.json").read_text())
    assert report["status"] == "target_reached" and report["model"] == "env"
    with pytest.raises(RuntimeError, match="reset"):
        env.step(write(GOOD))
    env.close()


def test_wrong_candidate_gives_minus_one_with_the_reason(problem, tmp_path):
    env = make_env(problem, tmp_path)
    env.reset()
    env.step(write(WRONG))
    obs, reward, term, trunc, info = env.step({"name": "verify", "arguments": {}})
    assert reward == -1 and "output mismatch" in info["verdict"]["reason"] and obs.startswith("FAILED")
    env.close()


def test_malformed_actions_are_error_observations(problem, tmp_path):
    env = make_env(problem, tmp_path, max_turns=20)
    env.reset()
    for action, expect in [(42, "Error: an action is"), ({"nme": "verify"}, "Error: an action is"),
                           ({"name": "nope", "arguments": {}}, "unknown tool 'nope'"),
                           ({"name": "verify", "arguments": [1]}, '"arguments" must be an object'),
                           ({"name": "write_file", "arguments": {"path": "model_new.py"}}, "missing required"),
                           ("I think I will write a kernel.", prompts.NO_TOOL_CALL)]:
        obs, reward, term, trunc, info = env.step(action)
        assert expect in obs and reward == 0 and not (term or trunc), (action, obs)
    # the text protocol's fenced block is a call too, as is an OpenAI assistant message
    text = 'Writing it.\n```tool\n{"name": "write_file", "arguments": {"path": "a.txt", "content": "x"}}\n```'
    assert env.step(text)[0].startswith(prompts.OBSERVATION_PREFIX + "write_file")
    message = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'}}]}
    env.step(message)
    assert env.messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": env.messages[-1]["content"]}
    assert "x" in env.messages[-1]["content"]
    env.close()


def test_turn_limit_truncates_and_finish_terminates(problem, tmp_path):
    env = make_env(problem, tmp_path, max_turns=2)
    env.reset()
    assert env.step(write(GOOD))[3] is False
    obs, reward, term, trunc, info = env.step({"name": "list_files", "arguments": {}})
    assert trunc and not term and info["status"] == "turn_limit"
    env.reset()  # a new episode, a new run directory
    obs, reward, term, trunc, info = env.step({"name": "finish", "arguments": {"summary": "done"}})
    assert term and info["status"] == "finished" and reward == 0
    env.close()


def test_final_timing_counts_a_verified_best(problem, tmp_path):
    fake = FakeEvaluator(speedup=0.5)
    env = make_env(problem, tmp_path, evaluate=fake, final=("timing", "plain_build"))
    env.reset()
    env.step(write(GOOD))
    env.step({"name": "verify", "arguments": {}})
    obs, reward, term, trunc, info = env.step({"name": "finish", "arguments": {}})
    assert term and [c[2] for c in fake.calls] == ["verify", "timing", "verify"]
    assert info["best"]["candidate_us"] is not None and info["verdicts"][-1]["stage"] == "done"
    assert info["best"]["plain_build"] == "verified" and len(fake.plain) == 1
    env.close()


def test_bad_arguments_name_the_problem(tmp_path):
    with pytest.raises(Exception, match="no such file"):
        KernelEnv(tmp_path / "missing.py", device="cpu")
    with pytest.raises(ValueError, match="tool_mode"):
        KernelEnv(PROBLEMS / "scale_add.py", device="cpu", tool_mode="smoke")
    with pytest.raises(ValueError, match="unexpected keyword"):
        KernelEnv(PROBLEMS / "scale_add.py", device="cpu", colour="red")


HONEST = candidate_source("return _ext.scale_add_relu(x, y, self.scale)")
CHEAT = candidate_source("return torch.relu(x * self.scale + y)")  # torch compute: a fallback


@pytest.mark.slow
def test_real_judge_honest_then_cheating_candidate(problem, tmp_path):
    settings = Settings.from_eval_options(fast_options())
    before = _children()
    env = KernelEnv(problem, device="cpu", runs_dir=tmp_path / "runs", eval_base=settings.eval_base,
                    budget=settings.budget)
    env.reset()
    env.step(write(CHEAT))
    obs, reward, term, trunc, info = env.step({"name": "verify", "arguments": {}})
    assert reward == -1 and not info["verdict"]["correct"] and info["verdict"]["reason"], obs
    env.step(write(HONEST))
    obs, reward, term, trunc, info = env.step({"name": "benchmark", "arguments": {}})
    assert info["verdict"]["correct"] and info["verdict"]["candidate_us"] > 0, obs
    assert reward >= 1 and reward == info["best"]["reward"]
    env.close()
    assert _children() <= before  # nothing the environment started is left


def test_processes_left_by_a_step_are_ended_the_callers_are_not(problem, tmp_path):
    import subprocess

    leaked: list[subprocess.Popen] = []
    fake = FakeEvaluator()

    def leaky(problem_path, candidate, options):  # an evaluation that leaves a process behind
        leaked.append(subprocess.Popen(["sleep", "60"], start_new_session=True))
        return fake(problem_path, candidate, options)

    mine = subprocess.Popen(["sleep", "60"])  # the caller's own child
    try:
        env = make_env(problem, tmp_path, evaluate=leaky)
        env.reset()
        env.step(write(GOOD))
        assert env.step({"name": "verify", "arguments": {}})[1] == 1
        assert leaked and leaked[0].poll() is not None  # killed (and reaped) at the step's end
        env.close()
        assert mine.poll() is None and mine.pid in _children()
    finally:
        mine.kill()
        mine.wait()
