"""A candidate that forges the layout of its shared output (evaluate/outbox.py, handoff.py) gets a verdict,
never a crash of kcoder and never a pass: the judge refuses a malformed layout as tampering, the
reference process reports a wrong shape as a wrong answer. Both sandbox modes: the
descriptor must cross bwrap's namespaces as well. (Static checks off: they would refuse the
candidate's import of kcoder before anything runs.)"""

from __future__ import annotations

import json

import pytest
from sources import candidate_source

HONEST = "return _ext.scale_add_relu(x, y, self.scale)"
# The candidate's process is kcoder's worker with the candidate's code inside it: it can replace
# how the worker describes outputs.
FORGE = """import kcoder.evaluate.candidate.outbox as _outbox
_describe = _outbox.describe
def _forged(out, device):
    described = _describe(out, device)
    if described is not None:
        layout = described[0]
        {edit}
    return described
_outbox.describe = _forged"""
MISALIGNED = "layout['tree'][3] = 3"
LONGER = "layout['tree'][2] = [layout['tree'][2][0] * 2] + layout['tree'][2][1:]; layout['size'] *= 2"


def _verdict(evaluate_candidate, edit: str, sandbox: str):
    source = candidate_source(HONEST, header=FORGE.format(edit=edit))
    verdict = evaluate_candidate(source, sandbox=sandbox, static_checks=False, stop_after="verify")
    assert verdict.status == "rejected" and verdict.reward == -1 and verdict.stage == "verify", \
        json.dumps(verdict.to_dict())
    return verdict


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_a_malformed_layout_is_tampering(evaluate_candidate, sandbox):
    verdict = _verdict(evaluate_candidate, MISALIGNED, sandbox)
    assert "tampering" in verdict.reason and "offset" in verdict.reason, verdict.reason


def test_a_layout_of_another_shape_is_a_wrong_answer(evaluate_candidate):
    """Within the reference's bound (twice its output), a layout's wrong shape is reported as
    one; a layout naming more bytes than were shared is tests/unit/test_handoff.py's."""
    verdict = _verdict(evaluate_candidate, LONGER, "none")
    assert "wrong answer" in verdict.reason and "shape" in verdict.reason, verdict.reason


def test_the_honest_candidate_passes_by_descriptor(evaluate_candidate):
    """The same header with no change: the forged-layout tests above fail for their layout."""
    source = candidate_source(HONEST, header=FORGE.format(edit="pass"))
    verdict = evaluate_candidate(source, sandbox="bwrap", static_checks=False, stop_after="verify")
    assert verdict.status == "accepted", json.dumps(verdict.to_dict())
