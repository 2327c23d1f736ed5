"""The run-time guard lets the GEMM library's epilogue calls through only under --allow gemm
(the built-in policy emits torch._addmm_activation for a linear layer's bias + ReLU)."""

from __future__ import annotations

import pytest
import torch

from kcoder.evaluate.candidate.guard import Guard, GuardViolation


@pytest.mark.parametrize("call", [
    lambda b, x, w: torch._addmm_activation(b, x, w.t()),
    lambda b, x, w: torch._addmm_activation(b, x, w.t(), use_gelu=True),
    lambda b, x, w: torch.addmm(b, x, w.t()),
])
def test_addmm_epilogues_need_allow_gemm(call):
    b, x, w = torch.randn(5), torch.randn(3, 4), torch.randn(5, 4)
    allowed = Guard(candidate_file="model_new.py", allow=["gemm"])
    with allowed.active():
        out = call(b, x, w)
    assert allowed.violations == [] and out.shape == (3, 5)
    refused = Guard(candidate_file="model_new.py", allow=["conv"])
    with pytest.raises(GuardViolation, match="addmm"), refused.active():
        call(b, x, w)
    assert [v.op for v in refused.violations] and "addmm" in refused.violations[0].op
