"""A stand-in evaluator for the unit tests (the end-to-end tests use the real harness)."""

from __future__ import annotations

from pathlib import Path

from kcoder.evaluate.options import EvalOptions
from kcoder.verdict import Verdict


class FakeEvaluator:
    """Judges by markers in the candidate text: BROKEN fails to build; FASTONLY fails to build
    the plain load_inline way (fast_build off); 'relu' is correct; `speedup` is the speed-up
    over torch.compile a timing run reports. `plain` lists the candidates built plainly."""

    def __init__(self, speedup: float = 1.2) -> None:
        self.speedup = speedup
        self.calls: list[tuple[Path, Path, str]] = []
        self.plain: list[Path] = []

    def __call__(self, problem: Path, candidate: Path, options: EvalOptions) -> Verdict:
        self.calls.append((problem, candidate, options.stop_after))
        src = candidate.read_text()
        v = Verdict(problem=str(problem), candidate=str(candidate), device=options.device)
        if not options.fast_build:
            self.plain.append(candidate)
        if "BROKEN" in src or ("FASTONLY" in src and not options.fast_build):
            return v.fail("build", "compilation failed: expected ';' before 'return'",
                          log="main.cpp:5:36: error: expected ';' before 'return'")
        v.compiled = True
        if "relu" not in src:
            return v.fail("verify", "output mismatch on input set 0: max abs err 2.1")
        v.correct, v.stage, v.reward, v.reason = True, options.stop_after, 1, "correct"
        if options.stop_after == "timing":
            v.stage = "done"
            v.eager_us, v.compile_us = 100.0, 90.0
            v.candidate_us = 90.0 / self.speedup
            v.speedup_vs_compile, v.speedup_vs_eager = self.speedup, 100.0 / v.candidate_us
            v.reason = f"correct, {self.speedup:.2f}x vs torch.compile"
        return v
