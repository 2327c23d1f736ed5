"""The REPL without real builds: slash commands, input handling, resume, model switch.

The evaluator here is the agent tests' FakeEvaluator (judges by markers in the text); the
real harness runs in test_session.py.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

from agent.fakes import FakeEvaluator
from agent.llm_server import call, reply, text_tool_reply
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from .driver import drive, enter

ROOT = Path(__file__).resolve().parents[2]
GOOD = "# fused relu kernel\n"


def user_messages(body: dict) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def test_scripted_stdin_commands_and_nearest_suggestion(problem, tmp_path, kcoder_home):
    """Not a terminal: lines come from stdin. Unknown commands suggest the nearest one."""
    script = "/help\n/comit\n/b\n/ev\n/profile\n/exit\n"
    proc = subprocess.run([sys.executable, "-m", "kcoder", "chat", str(problem), "--runs-dir",
                           str(tmp_path / "runs"), "--device", "cpu"], input=script,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr
    for name in ("/accept", "/bench", "/best", "/clear", "/commit", "/cost", "/diff", "/eval",
                 "/help", "/model", "/profile", "/quit", "/resume", "/save", "/skills", "/undo"):
        assert f"\n{name} " in out, name
    assert "unknown command /comit; did you mean /commit?" in out
    assert "/b is ambiguous: /bench, /best" in out
    assert "model_new.py does not exist yet" in out  # /ev ran /eval (unique prefix)
    assert "/profile profiles CUDA kernels, and this session targets the cpu" in out
    assert "kcoder> /comit" in out  # piped input is echoed, so the transcript reads well
    assert "session saved in" in out


def test_keys_multiline_ctrl_c_ctrl_d_and_history(scripted, problem, tmp_path, kcoder_home):
    server = scripted([reply("Noted: two lines."), reply("Second answer.")])
    keys = ("first line\x1b\rsecond line\r"  # Esc-Enter (Alt-Enter) inserts a newline
            "dropped text\x03"  # Ctrl-C at the prompt drops the line, the chat goes on
            "next\r"
            "\x04")  # Ctrl-D exits
    run = drive(problem, keys, tmp_path, server=server)
    assert run.code == 0
    first, second = (user_messages(body)[-1] for body in server.requests)
    assert first.endswith("The user's request:\n\nfirst line\nsecond line")
    assert second == "next"
    assert "dropped text" not in json.dumps(server.requests)
    assert "Noted: two lines." in run.output and "Second answer." in run.output
    history = (kcoder_home / "history").read_text()
    assert "+first line\n+second line" in history and "+next" in history


def test_tool_calls_are_one_line_each_files_only_on_request(scripted, problem, tmp_path):
    script = [
        reply("Writing it.", call("write_file", path="model_new.py", content="x = 1\ny = 2\n")),
        reply("", call("edit_file", path="model_new.py", old_string="y = 2", new_string="y = 3\nz = 4")),
        reply("", call("edit_file", path="model_new.py", old_string="nowhere", new_string="q")),
        reply("Done: **y** is now 3."),
    ]
    run = drive(problem, enter("change y", "/show", "/quit"), tmp_path, server=scripted(script),
                evaluator=FakeEvaluator())
    out = run.output
    assert "→ write_file model_new.py (new file, 2 lines, 12 B)" in out
    assert "→ edit_file model_new.py (+2 −1)" in out  # the diff stat, not the diff
    assert "✗ Error calling edit_file: old_string not found in model_new.py" in out
    assert "Done: y is now 3." in out  # Markdown rendered (no ** left)
    assert "-y = 2" not in out  # no diff unless asked for
    assert out.count("x = 1") == 1 and "z = 4" in out  # once: /show printed the file
    verbose = drive(problem, enter("change y", "/quit"), tmp_path, server=scripted(script),
                    evaluator=FakeEvaluator(), verbose=True).output
    assert "x = 1" in verbose and "-y = 2" in verbose and "+y = 3" in verbose  # --verbose: code, diffs


def test_text_tool_blocks_are_not_echoed(scripted, problem, tmp_path):
    content = "import torch\n" + "".join(f"# line {i}\n" for i in range(30))
    server = scripted([text_tool_reply("I will write the kernel now.", "write_file", path="model_new.py",
                                       content=content),
                       reply("Written; `/eval` checks it.")])
    out = drive(problem, enter("write it", "/quit"), tmp_path, server=server, evaluator=FakeEvaluator(),
                tool_call="text").output
    assert "I will write the kernel now." in out and "Written; /eval checks it." in out
    assert "→ write_file model_new.py (new file, 31 lines" in out
    assert '"name"' not in out and "```" not in out and "line 7" not in out  # neither the block nor the file


def test_eval_accept_and_commit_outside_git(scripted, problem, tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    server = scripted([reply("Here.", call("write_file", path="model_new.py", content=GOOD)),
                       reply("Good.")])
    kept = tmp_path / "kept.py"
    run = drive(problem, enter("write it", "/accept", "/eval", "/diff", "/accept", "/commit",
                               f"/save {kept}", f"/save {kept}", "/quit"), tmp_path,
                server=server, evaluator=FakeEvaluator())
    out = run.output
    assert "model_new.py has not passed verification as it is now" in out  # before /eval
    assert "CORRECT" in out and "new best verified candidate" in out
    assert "model_new.py and best/model_new.py are identical" in out
    assert "accepted model_new.py (candidates/model_new_0001.py; verified, not timed" in out
    assert "is not inside a git repository; run `git init` there" in out
    assert "(/save FILE copies the accepted kernel anywhere, without git)" in out
    assert kept.read_text() == GOOD and f"saved candidates/model_new_0001.py to {kept}" in out
    assert "exists; kcoder does not overwrite files" in out
    assert run.code == 0


def test_commit_refuses_a_candidate_that_fails_the_plain_build(scripted, problem, tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    server = scripted([reply("Here.", call("write_file", path="model_new.py", content="# relu FASTONLY\n")),
                       reply("Good.")])
    fake = FakeEvaluator()
    run = drive(problem, enter("write it", "/eval", "/accept", "/commit", "/quit"), tmp_path,
                server=server, evaluator=fake)
    assert "CORRECT" in run.output and "accepted model_new.py" in run.output
    assert ("checking that candidates/model_new_0001.py builds and verifies as plain load_inline builds it: "
            "every evaluation so far used kcoder's faster build") in run.output  # /commit says what and why
    assert "plain load_inline build check: model_new_0001.py" in run.output  # ... and its verdict line
    assert "not committed: built as plain load_inline builds it, the accepted candidate fails" in run.output
    assert "compilation failed" in run.output and len(fake.plain) == 1
    assert "git repository" not in run.output  # refused before git was looked at


def test_eval_verdict_reaches_the_model_next_turn(scripted, problem, tmp_path):
    server = scripted([reply("", call("write_file", path="model_new.py", content=GOOD)),
                       reply("Written."), reply("It passed.")])
    drive(problem, enter("write it", "/eval", "did it pass?", "/quit"), tmp_path, server=server,
          evaluator=FakeEvaluator())
    last = user_messages(server.requests[-1])[-1]
    assert last.startswith("[The user ran /eval on model_new.py; the evaluator said:]\nPASSED verify")
    assert last.endswith("did it pass?")


def test_resume_clear_and_model_switch(scripted, problem, tmp_path):
    first = scripted([reply("I will remember 42.")])
    run = drive(problem, enter("remember 42", "/quit"), tmp_path, server=first)
    assert run.run_dir is not None and (run.run_dir / "report.md").is_file()
    second = scripted([reply("It was 42."), reply("Fresh start."), reply("Other model here.")])
    drive(problem, enter("what number?", "/clear", "hello", "/model openai/other", "/model",
                         "hi", "/quit"), tmp_path, server=second, resume=run.run_dir)
    resumed, cleared, switched = second.requests
    assert "remember 42" in json.dumps(resumed["messages"])
    assert "remember 42" not in json.dumps(cleared["messages"])
    assert cleared["messages"][0]["role"] == "system"
    assert resumed["model"] == "scripted" and switched["model"] == "other"


def test_resume_command_picks_the_newest_earlier_run(scripted, problem, tmp_path):
    first = scripted([reply("Noted.")])
    earlier = drive(problem, enter("keep 7 in mind", "/quit"), tmp_path, server=first).run_dir
    second = scripted([reply("7.")])
    run = drive(problem, enter("/resume", "which number?", "/quit"), tmp_path, server=second)
    assert f"resumed {earlier}" in run.output
    assert "keep 7 in mind" in json.dumps(second.requests[0]["messages"])


def test_completion_of_commands_arguments_and_paths(scripted, problem, tmp_path, monkeypatch):
    from helpers import fast_options
    from rich.console import Console

    from kcoder.chat.commands import Commands
    from kcoder.chat.io import InputOutput
    from kcoder.chat.repl import ChatCompleter
    from kcoder.chat.session import ChatSession
    from kcoder.settings import Settings

    chat_io = InputOutput(console=Console(file=io.StringIO()), interactive=False)
    session = ChatSession(problem, chat_io, Settings.from_eval_options(fast_options(), runs_dir=tmp_path / "runs"))
    completer = ChatCompleter(Commands(session, chat_io))
    monkeypatch.chdir(problem.parent)

    def complete(text: str) -> list[str]:
        """Each completion applied to the line, as Tab would."""
        return [text[:len(text) + c.start_position] + c.text
                for c in completer.get_completions(Document(text), CompleteEvent())]

    assert complete("/com") == ["/commit"]
    assert complete("/c") == ["/clear", "/commit", "/cost"]
    assert complete("/accept b") == ["/accept best"]
    assert complete("/diff mod") == ["/diff model.py"]  # a run-directory file
    assert complete("/diff sca") == ["/diff scale_add.py"]  # a path from the current directory
    assert complete("look at ./sca") == ["look at ./scale_add.py"]
    assert complete("plain words") == []


def test_profile_renders_the_report_and_tells_the_model(scripted, problem, tmp_path):
    from helpers import fast_options

    from kcoder.profile.profiler import ProfileReport

    seen = []

    def fake_profiler(reference, candidate, options):
        seen.append((Path(candidate).name, options.full))
        return ProfileReport(problem=str(reference), candidate=str(candidate), mode="timeline",
                             device_name="Fake GPU", timeline=[{
                                 "name": "scale_add_relu_kernel", "us_per_forward": 12.5,
                                 "calls_per_forward": 1, "us_per_call": 12.5}])

    server = scripted([reply("", call("write_file", path="model_new.py", content=GOOD)),
                       reply("Written."), reply("One kernel, 12.5 us.")])
    run = drive(problem, enter("write it", "/profile --full", "how fast is it?", "/quit"), tmp_path,
                server=server, options=fast_options(device="cuda"), profiler=fake_profiler)
    assert seen == [("model_new.py", True)]
    assert "profile (timeline) of" in run.output and "scale_add_relu_kernel" in run.output
    last = user_messages(server.requests[-1])[-1]
    assert last.startswith("[The user ran /profile on model_new.py; the profiler said:]")


def _policy_tools(run_dir: Path) -> list[str]:
    """The tools the built-in policy called, in order, from the trajectory."""
    records = [json.loads(line) for line in (run_dir / "trajectory.jsonl").read_text().splitlines()]
    return [c["function"]["name"] for r in records if r.get("type") == "message"
            for c in r["message"].get("tool_calls") or () if c["id"].startswith("builtin-")]


def test_chat_with_model_builtin_runs_the_policy_steps(problem, tmp_path):
    """`kcoder chat --model builtin`: a message runs the policy's steps as one turn, no LLM."""
    run = drive(problem, enter("make it faster", "again", "/quit"), tmp_path, model="builtin",
                evaluator=FakeEvaluator(), tune_trials=1)
    assert run.code == 0 and run.run_dir is not None, run.output
    assert "error" not in run.output and "reads no requests" in run.output
    assert "Captured Model.forward and generated 1 kernel(s)" in run.output
    assert "target reached" in run.output  # the fake evaluator's 1.2x after the tune step
    assert _policy_tools(run.run_dir) == ["write_file", "verify", "tune", "finish"]
    best = run.run_dir / "best" / "model_new.py"
    assert best.read_text().startswith('"""Written by kcoder\'s built-in policy')
    assert json.loads((run.run_dir / "report.json").read_text())["model"] == "builtin"


def test_model_builtin_after_an_llm_turn_writes_the_policy_kernel(scripted, problem, tmp_path):
    """/model builtin mid-conversation: the policy starts at its first step although the LLM
    already spoke (the bug: litellm refused the name 'builtin')."""
    server = scripted([reply("Hello; what should I do?")])
    run = drive(problem, enter("hi", "/model builtin", "write a kernel", "/quit"), tmp_path,
                server=server, evaluator=FakeEvaluator(), tune_trials=1)
    assert run.code == 0 and run.run_dir is not None
    assert len(server.requests) == 1 and "BadRequestError" not in run.output
    assert "model: builtin" in run.output
    assert _policy_tools(run.run_dir)[:2] == ["write_file", "verify"]
    assert (run.run_dir / "model_new.py").read_text().startswith('"""Written by kcoder\'s built-in policy')
