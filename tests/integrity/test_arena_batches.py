"""The candidate's process only computes (issue 45), cpu target: its batches run in arenas the
reference process writes and reads (kcoder/evaluate/arenaclock.py), so rewriting kcoder's code in
that process wins nothing.

Each attack below was accepted, or is the cpu form of one that was, on main a08ce2e, where the
batch loop, the inputs' factors, the commitments and a calibration ran in the candidate's
process: a batch answered at once with chosen commitments (122x vs eager there), outputs
computed after "done" and nudged to their commitment, harness work skipped but its calibrated
cost still taken off (the calibration is now timed with the candidate frozen, which
tests/unit/test_arena.py shows). Each runs with static_checks=False (the static checks refuse
the imports of kcoder they need): they test the layers behind them. The working extension is
tests/sources.py:TESTLIB_CPP's.
"""

import pytest
from sources import candidate_source

pytestmark = pytest.mark.slow

HONEST_FORWARD = "return _ext.scale_add_relu(x, y, self.scale)"
TIMED = dict(compile_baseline=False)
UNWRITTEN = "left output elements unwritten when the clock stopped"
WRONG = "gave a wrong answer for its own inputs"

# The worker's request handler shadowed by an instance attribute (the class stays as it was):
# every batch answered "done" at once, no call made (a08ce2e: op_batch answered so, with forged
# commitments, reached through load_inline's closure).
ANSWERED_AT_ONCE = '''
import gc, sys, types

def _done(self, **request):
    return {"done": True}

_cls = sys.modules["__main__"].CandidateServer  # the worker runs as __main__
for _o in gc.get_objects():
    if isinstance(_o, _cls):
        _o.op_arena = types.MethodType(_done, _o)
        _o.op_batch = types.MethodType(_done, _o)
'''

# The calls run, but the copy into the judge's slots (the one piece of harness work left inside
# the clock) is skipped: its cost would have been taken off all the same (a08ce2e: _scale_flat
# and leaves replaced).
COPY_SKIPPED = '''
import kcoder.evaluate.harness.arena as _arena

_arena.store = lambda *args, **kwargs: None
'''

# "done" at once, the outputs computed afterwards by a thread of the process's own (a08ce2e: the
# output computed after the clock stopped, when the judge asked for it).
COMPUTED_LATER = '''
import threading
import kcoder.evaluate.harness.arena as _arena

_run = _arena.MappedArena.run

def _later(self, model, call, layout):
    threading.Thread(target=_run, args=(self, model, lambda fn: fn(), layout), daemon=True).start()

_arena.MappedArena.run = _later
'''


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.mark.parametrize("header", [ANSWERED_AT_ONCE, COPY_SKIPPED, COMPUTED_LATER],
                         ids=["answered-at-once", "copy-skipped", "computed-later"])
def test_rewriting_the_batch_in_the_candidates_process_is_refused(evaluate_candidate, header):
    verdict = evaluate_candidate(candidate_source(HONEST_FORWARD, header=header), static_checks=False, **TIMED)
    assert verdict.status == "rejected" and verdict.reward == -1 and verdict.stage == "timing", verdict.reason
    assert UNWRITTEN in verdict.reason or WRONG in verdict.reason, verdict.reason


# --- weights the judge draws (issue 45 item 5) ---------------------------------------------------
def _groupnorm_candidate(forward_body: str) -> str:
    """A candidate for tests/problems/groupnorm_mean.py that builds TESTLIB_CPP (shared build)."""
    from sources import TESTLIB_CPP, TESTLIB_FUNCTIONS

    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_ext = load_inline(name="kcoder_testlib", cpp_sources=[{TESTLIB_CPP!r}], functions={TESTLIB_FUNCTIONS!r},
                   extra_cflags=["-O2", "-fopenmp"], extra_ldflags=["-fopenmp"])


class ModelNew(nn.Module):
    def __init__(self, channels, groups):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels)
        self.register_buffer("answer", torch.zeros(8))  # the mean of the bias, as initialised

    def forward(self, x):
        {forward_body}
'''


def test_right_only_for_the_initial_weights_is_refused(evaluate_candidate):
    """Returns the mean of the initial bias (zeros) without reading x: right while GroupNorm's weight
    is uniform (a08ce2e accepted this kind at 107x vs eager), wrong with the judge's draw."""
    verdict = evaluate_candidate(_groupnorm_candidate("return _ext.scale_add_relu(self.answer, self.answer, 1.0)"),
                                 problem="groupnorm_mean.py", stop_after="verify")
    assert verdict.status == "rejected" and verdict.reward == -1 and verdict.stage == "verify", verdict.reason
    assert "with parameters and buffers the judge drew" in verdict.reason, verdict.reason
