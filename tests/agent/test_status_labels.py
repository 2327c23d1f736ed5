"""Every stage an evaluation can stop after has a status label and a one-line result (issue 41:
the compile-only step of the tune's builder crashed the display with KeyError: 'compile')."""

from pathlib import Path

from kcoder.agent.status import step_label
from kcoder.choices import STAGES
from kcoder.evaluate.options import EvalOptions
from kcoder.ui import verdict_line
from kcoder.verdict import Verdict


def test_every_stage_has_a_label_and_a_result_line():
    for stage in STAGES:
        options = EvalOptions(device="cpu", stop_after=stage)
        label = step_label(Path("point003.py"), options, run_fast_build=False)
        assert label.endswith(": point003.py") and len(label) > len(": point003.py")
        verdict = Verdict(problem="model.py", candidate="point003.py", device="cpu")
        verdict.compiled = True
        verdict.reason = "compiled"
        line, passed = verdict_line(verdict, "point003.py", 1.0, stage)
        if stage in ("compile", "build"):  # a compile-only step passes when it compiled
            assert passed and line.startswith("✓") and "failed" not in line, line
        else:
            assert not passed and "failed" in line, line
