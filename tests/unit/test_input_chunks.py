"""Inputs are compared with their regenerated copy in pieces (verify.inputs_equal), so the
comparison's temporaries stay small next to a multi-GiB input set; the answer is the same."""

from __future__ import annotations

import pytest
import torch

from kcoder.evaluate.harness import verify


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(verify, "EQUAL_CHUNK", 1000)


def test_a_change_in_the_last_piece_shows():
    x = torch.randn(10, 1001)
    y = x.clone()
    assert verify.inputs_equal([x], [y])
    y[9, 1000] = 5.0
    assert not verify.inputs_equal([x], [y])


def test_nan_matches_nan_and_integers_compare_exactly():
    x = torch.randn(5000)
    x[4321] = float("nan")
    assert verify.inputs_equal([x], [x.clone()])
    i = torch.arange(5000)
    j = i.clone()
    j[4999] = 0
    assert not verify.inputs_equal([i], [j])


def test_non_contiguous_inputs_compare_whole():
    t = torch.randn(100, 100).t()
    same = torch.empty(100, 100).t().copy_(t)
    assert same.stride() == t.stride() and verify.inputs_equal([t], [same])
    same[0, 99] += 1
    assert not verify.inputs_equal([t], [same])
