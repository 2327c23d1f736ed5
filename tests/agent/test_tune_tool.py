"""The agent's tune tool through the scripted OpenAI-compatible server, the real litellm client
and the real judge on the cpu target (the candidate shares the suite's TESTLIB build)."""

from __future__ import annotations

import json

import pytest
from sources import tunable_candidate

from .llm_server import call, reply
from .test_e2e import report_of, run_opt, write

pytestmark = pytest.mark.slow


def test_agent_tunes_its_candidate(scripted, problem, tmp_path, api_key):
    TUNABLE = tunable_candidate()
    server = scripted([
        write(TUNABLE),
        reply("Search the declared space.", call("tune", strategy="exhaustive", trials=6)),
        reply("Done.", call("finish")),
    ])
    code, run_dir = run_opt(problem, server, tmp_path, max_turns=5)
    records = [json.loads(line) for line in (run_dir / "trajectory.jsonl").read_text().splitlines()]
    tool_texts = [r["message"]["content"] for r in records
                  if r.get("type") == "message" and r["message"].get("role") == "tool"]
    observation = tool_texts[1]  # write_file's, then tune's (its benchmark reached the low target)
    assert "strategy exhaustive: 6 points (" in observation
    assert "constraint: violates CHUNK <= 2" in observation and "incorrect: wrong answer" in observation
    assert "wrote the best CONFIG into model_new.py" in observation and "PASSED timing" in observation
    tuned = (run_dir / "model_new.py").read_text()
    assert '"KERNEL": "relu"' in tuned.split("CONFIG = ", 1)[1].splitlines()[0]
    assert tuned.replace(tuned.split("CONFIG = ", 1)[1].splitlines()[0], "") == \
        TUNABLE.replace(TUNABLE.split("CONFIG = ", 1)[1].splitlines()[0], "")
    report = report_of(run_dir)
    assert code == 0 and report["best"]["correct"]  # the tuned file is the run's best candidate
    assert json.loads(next((run_dir / "tune").glob("*/table.json")).read_text())["best"]["config"]["KERNEL"] == "relu"
