"""Every example's CPU solution is accepted on the cpu target (real builds, real baselines)."""

import pytest
from helpers import ROOT

EXAMPLES = sorted(p.parent for p in (ROOT / "examples").glob("*/solution_cpu.py"))


def test_there_are_at_least_four_examples_with_both_targets():
    assert len(EXAMPLES) >= 4
    for folder in EXAMPLES:
        assert (folder / "model.py").exists() and (folder / "solution_cuda.py").exists(), folder


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_example_cpu_solution_accepted(example, example_verdict):
    verdict = example_verdict(example)
    assert verdict.correct and verdict.stage == "done", verdict.reason
    assert verdict.reward >= 1 and verdict.speedup_vs_eager > 0
    assert verdict.n_input_sets >= 5
