"""The loop through `optimize`, driven by the scripted server, judged by a fake evaluator."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from kcoder.agent import prompts
from kcoder.agent.loop import fit_context
from kcoder.agent.optimize import optimize
from kcoder.settings import Settings
from kcoder.ui import Output

from .fakes import FakeEvaluator
from .llm_server import call, reply, text_tool_reply

GOOD = "# fused relu kernel\n"
WRONG = "# forgot the activation\n"
BROKEN = "# BROKEN\n"


def run_opt(problem: Path, server: Any, tmp_path: Path, evaluator: Any = None,
            **kw: Any) -> tuple[int, str, Path | None]:
    """optimize() with test defaults (`kw`: Settings fields); returns (exit code, terminal
    output, run dir)."""
    out = io.StringIO()
    fields: dict[str, Any] = dict(
        model="openai/scripted", api_base=server.base_url if server else None, device="cpu",
        max_turns=20, runs_dir=tmp_path / "runs", tool_call="native", preflight=False)
    settings = Settings(**{**fields, **kw})
    code = optimize(problem, settings, Output(Console(file=out, width=120)),
                    evaluator=evaluator or FakeEvaluator())
    runs = sorted((tmp_path / "runs").glob("*")) if (tmp_path / "runs").exists() else []
    return code, out.getvalue(), (settings.resume or (runs[-1] if runs else None))


def write(content: str) -> dict[str, Any]:
    return reply("Writing the candidate.", call("write_file", path="model_new.py", content=content))


def report_of(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "report.json").read_text())


def test_trajectory_is_written_before_each_request(scripted, problem, tmp_path, api_key):
    seen: list[tuple[int, int]] = []

    def check(body: dict[str, Any]) -> None:
        traj = next((tmp_path / "runs").glob("*/trajectory.jsonl"))
        records = [json.loads(line) for line in traj.read_text().splitlines()]
        messages = [r["message"] for r in records if r["type"] == "message"]
        seen.append((len(messages), len(body["messages"])))
        assert messages[-1]["content"] == body["messages"][-1]["content"]

    server = scripted([write(GOOD), reply("", call("verify")), reply("", call("finish"))],
                      on_request=check)
    code, _, run_dir = run_opt(problem, server, tmp_path)
    assert code == 0
    assert [n for n, _ in seen] == [2, 4, 6]  # everything sent was already on disk
    assert all(on_disk == sent for on_disk, sent in seen)
    kinds = [json.loads(line)["type"] for line in (run_dir / "trajectory.jsonl").open()]
    assert kinds[0] == "start" and kinds[-1] == "end" and "verdict" in kinds


def test_target_reached_ends_run_and_keeps_best(scripted, problem, tmp_path, api_key):
    original = problem.read_text()
    server = scripted([write(GOOD), reply("", call("benchmark")), reply("", call("finish"))])
    code, out, run_dir = run_opt(problem, server, tmp_path)
    assert code == 0 and server.remaining == 1  # stopped by the verdict, not by the model
    report = report_of(run_dir)
    assert report["status"] == "target_reached" and report["target_reached"]
    assert report["best"]["speedup_vs_compile"] == pytest.approx(1.2)
    assert (run_dir / "best" / "model_new.py").read_text() == GOOD
    assert (run_dir / "report.md").read_text().startswith("# kcoder run: scale_add.py")
    assert "TARGET REACHED" in out
    assert problem.read_text() == original  # the user's file is never modified


def test_keep_going_continues_past_target(scripted, problem, tmp_path, api_key):
    server = scripted([write(GOOD), reply("", call("benchmark")), reply("", call("finish"))])
    code, _, run_dir = run_opt(problem, server, tmp_path, keep_going=True)
    report = report_of(run_dir)
    assert code == 0 and server.remaining == 0
    assert report["status"] == "finished" and report["target_reached"]


def test_finish_never_declares_success(scripted, problem, tmp_path, api_key):
    server = scripted([write(WRONG), reply("", call("verify")),
                       reply("It is 10x faster, trust me.", call("finish", summary="10x"))])
    code, out, run_dir = run_opt(problem, server, tmp_path)
    report = report_of(run_dir)
    assert code == 1 and report["status"] == "finished" and report["best"] is None
    assert not (run_dir / "best" / "model_new.py").exists()
    assert "NO VERIFIED CANDIDATE" in out


def test_turn_limit_leaves_best_and_report(scripted, problem, tmp_path, api_key):
    fake = FakeEvaluator(speedup=0.8)
    server = scripted([write(GOOD), reply("", call("verify")), write(WRONG),
                       reply("", call("verify")), reply("", call("finish"))])
    code, _, run_dir = run_opt(problem, server, tmp_path, max_turns=3, evaluator=fake)
    report = report_of(run_dir)
    assert code == 0 and report["status"] == "turn_limit" and report["turns"] == 3
    assert (run_dir / "best" / "model_new.py").read_text() == GOOD
    # The best was only verified during the run; it is timed once for the report, then
    # verified once more, built as plain load_inline builds it.
    assert [c[2] for c in fake.calls[-2:]] == ["timing", "verify"]
    assert report["best"]["speedup_vs_compile"] == 0.8 and report["best"]["plain_build"] == "verified"
    assert [p.read_text() for p in fake.plain] == [GOOD]
    assert not report["target_reached"]


def test_best_that_fails_a_plain_build_is_not_a_success(scripted, problem, tmp_path, api_key):
    fake = FakeEvaluator()
    server = scripted([write("# relu FASTONLY\n"), reply("", call("benchmark")), reply("", call("finish"))])
    code, out, run_dir = run_opt(problem, server, tmp_path, evaluator=fake)
    report = report_of(run_dir)
    assert code == 1 and len(fake.plain) == 1
    assert report["best"]["plain_build"].startswith("compilation failed")
    assert "FAILS WHEN BUILT BY PLAIN load_inline" in out
    saved = json.loads((run_dir / "best" / "verdict.json").read_text())
    assert saved["plain_build"] == report["best"]["plain_build"]
    records = [json.loads(line) for line in (run_dir / "trajectory.jsonl").open()]
    assert any(r["type"] == "plain_build" and not r["verdict"]["correct"] for r in records)


def test_stuck_on_same_failing_action(scripted, problem, tmp_path, api_key):
    server = scripted([write(BROKEN)] + [reply("", call("compile"))] * 5)
    code, _, run_dir = run_opt(problem, server, tmp_path)
    report = report_of(run_dir)
    assert code == 1 and report["status"] == "stuck" and server.remaining == 2
    assert "compile" in report["message"]


def test_bad_tool_arguments_answered_with_error(scripted, problem, tmp_path, api_key):
    server = scripted([reply("", call("write_file", path="model_new.py")),
                       reply("", {"name": "write_file", "arguments": "{not json"}),
                       reply("", call("finish"))])
    code, _, _ = run_opt(problem, server, tmp_path)
    assert code == 1
    second, third = server.requests[1]["messages"], server.requests[2]["messages"]
    assert second[-1]["role"] == "tool" and "missing required argument(s): content" in second[-1]["content"]
    assert "not valid JSON" in third[-1]["content"]


def test_replies_without_tool_calls(scripted, problem, tmp_path, api_key):
    server = scripted([reply("Thinking...")] * 5)
    code, _, run_dir = run_opt(problem, server, tmp_path)
    assert report_of(run_dir)["status"] == "format_errors" and code == 1
    assert server.requests[1]["messages"][-1]["content"] == prompts.NO_TOOL_CALL


def test_text_protocol_run(scripted, problem, tmp_path, api_key):
    server = scripted([text_tool_reply("Plan.", "write_file", path="model_new.py", content=GOOD),
                       text_tool_reply("Check.", "benchmark")])
    code, _, run_dir = run_opt(problem, server, tmp_path, tool_call="text")
    assert code == 0 and report_of(run_dir)["status"] == "target_reached"
    assert "```tool" in server.requests[0]["messages"][0]["content"]  # protocol explained
    obs = server.requests[1]["messages"][-1]
    assert obs["role"] == "user" and obs["content"].startswith(prompts.OBSERVATION_PREFIX)


def test_fatal_llm_error_still_reports(scripted, problem, tmp_path, api_key):
    server = scripted([write(GOOD), reply("", call("verify")),
                       {"status": 401, "error": "invalid api key"}])
    code, out, run_dir = run_opt(problem, server, tmp_path)
    report = report_of(run_dir)
    assert report["status"] == "llm_error" and "authentication failed" in report["message"]
    assert code == 0 and (run_dir / "best" / "model_new.py").exists()


def test_resume_continues_the_conversation(scripted, problem, tmp_path, api_key):
    first = scripted([write(BROKEN), reply("", call("compile"))])
    code, _, run_dir = run_opt(problem, first, tmp_path, max_turns=2)
    assert code == 1 and report_of(run_dir)["status"] == "turn_limit"
    # Simulate a kill in the middle of a step: a tool call with no result on disk.
    dangling = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_x", "type": "function", "function": {"name": "compile", "arguments": "{}"}}]}
    with (run_dir / "trajectory.jsonl").open("a") as fh:
        fh.write(json.dumps({"type": "message", "turn": 3, "message": dangling}) + "\n")
        fh.write('{"type": "message", "turn": 3, "mess')  # a torn last line
    second = scripted([reply("", call("edit_file", path="model_new.py", old_string="# BROKEN",
                                      new_string="# fused relu kernel")),
                       reply("", call("benchmark"))])
    code, _, _ = run_opt(problem, second, tmp_path, resume=run_dir, max_turns=10)
    assert code == 0
    sent = second.requests[0]["messages"]
    assert sent[0]["role"] == "system" and "BROKEN" in json.dumps(sent)  # old history kept
    assert {"role": "tool", "tool_call_id": "call_x", "content": prompts.NOT_RUN} in sent
    assert sent[-1]["content"] == prompts.RESUMED
    report = report_of(run_dir)
    assert report["status"] == "target_reached" and report["turns"] == 5
    records = []
    for line in (run_dir / "trajectory.jsonl").read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    assert [r.get("resumed", False) for r in records if r["type"] == "start"] == [False, True]


@pytest.mark.parametrize("model", [None, "builtin"])
def test_no_model_runs_the_builtin_policy_and_says_so(problem, tmp_path, model):
    """The policy's steps through the loop (the fake evaluator: tests/policy builds for real);
    `--model builtin` names it (no litellm request, no API key asked)."""
    code, out, run_dir = run_opt(problem, None, tmp_path, model=model, tune_trials=1)
    assert (model is not None) != out.startswith("no --model: running kcoder's built-in policy")
    report = report_of(run_dir)
    # the fake evaluator's verdicts are fast: the tune step's benchmark reaches the target
    assert code == 0 and report["model"] == "builtin" and report["status"] == "target_reached"
    assert report["policy"]["kernels"] == ["k0: pointwise over [512, 1024]"]
    assert (run_dir / "best" / "model_new.py").read_text().startswith('"""Written by kcoder\'s built-in policy')


def test_missing_api_key(problem, tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    code, out, run_dir = run_opt(problem, None, tmp_path, model="anthropic/claude-sonnet-4-5",
                                 tool_call=None)
    assert code == 2 and "ANTHROPIC_API_KEY" in out and run_dir is None


def test_bad_inputs_exit_2(tmp_path, api_key):
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\n")
    code, out, _ = run_opt(bad, None, tmp_path, api_base="http://127.0.0.1:9/v1")
    assert code == 2 and "bad.py" in out
    code, out, _ = run_opt(bad, None, tmp_path, api_base="http://127.0.0.1:9/v1", device="tpu")
    assert code == 2 and "device" in out
    code, out, _ = run_opt(bad, None, tmp_path, api_base="http://127.0.0.1:9/v1",
                           resume=tmp_path / "nope")
    assert code == 2 and "not a kcoder run directory" in out


def test_fit_context_trims_old_outputs_first():
    big = "x" * 40_000
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    for i in range(10):
        messages.append({"role": "assistant", "content": f"step {i}", "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "write_file", "arguments": json.dumps({"content": big})}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": big})
    fitted = fit_context(messages, budget=80_000)
    assert sum(len(json.dumps(m)) for m in fitted) // 4 <= 80_000
    assert fitted[:2] == messages[:2] and fitted[-6:] == messages[-6:]
    assert "[trimmed" in fitted[3]["content"]
    assert messages[3]["content"] == big  # the history itself is untouched
    assert fit_context(messages[:4], budget=10**6) == messages[:4]


@pytest.mark.parametrize(("limit", "status"), [({"max_cost": 0.0}, "cost_limit"),
                                               ({"max_time": 0.0}, "time_limit")])
def test_cost_and_time_limits(scripted, problem, tmp_path, api_key, limit, status):
    server = scripted([write(GOOD)])
    code, _, run_dir = run_opt(problem, server, tmp_path, **limit)
    assert code == 1 and report_of(run_dir)["status"] == status
    assert server.requests == []  # checked before asking the model


def test_native_mode_accepts_text_calls_from_servers_without_a_parser(scripted, problem,
                                                                       tmp_path, api_key):
    # e.g. vLLM started without --tool-call-parser: the call arrives as text.
    server = scripted([text_tool_reply("Plan.", "write_file", path="model_new.py", content=GOOD),
                       reply("", call("benchmark"))])
    code, _, _ = run_opt(problem, server, tmp_path)
    assert code == 0
    obs = server.requests[1]["messages"][-1]
    assert obs["role"] == "user" and obs["content"].startswith(prompts.OBSERVATION_PREFIX)


def test_builtin_policy_commits_its_kernel(problem, tmp_path, monkeypatch):
    """--commit after a policy run: the kernel lands on kcoder/<problem>, recorded as builtin."""
    import subprocess

    home = tmp_path / "home"
    home.mkdir()
    for var, value in (("HOME", str(home)), ("GIT_CONFIG_NOSYSTEM", "1"),
                       ("GIT_CONFIG_GLOBAL", str(home / ".gitconfig")), ("GIT_CEILING_DIRECTORIES", str(tmp_path))):
        monkeypatch.setenv(var, value)

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=problem.parent, check=True, capture_output=True, text=True).stdout

    git("init", "-q", "-b", "main")
    git("config", "user.name", "Test User")
    git("config", "user.email", "test@example.com")
    git("add", ".")
    git("commit", "-q", "-m", "initial")
    code, out, run_dir = run_opt(problem, None, tmp_path, model=None, tune_trials=1, commit=True)
    assert code == 0 and "committed" in out
    assert "Kcoder-Model: builtin" in git("log", "-1", "--format=%B", "kcoder/scale_add")
    committed = git("show", "kcoder/scale_add:kcoder/scale_add/model_new.py")
    assert committed == (run_dir / "best" / "model_new.py").read_text()
    assert git("status", "--porcelain") == ""  # the user's checkout is untouched
