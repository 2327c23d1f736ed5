"""A guarded call costs the call: the guard's dispatch mode does not pull in torch._dynamo
(its first guarded op imported it: 1.2-1.4 s of every candidate process's verification)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from kcoder.evaluate.candidate.guard import Guard, GuardViolation

SCRIPT = """
import sys, torch
from kcoder.evaluate.candidate.guard import Guard
from kcoder.evaluate.harness.verify import guarded_call

class Honest(torch.nn.Module):
    def forward(self, x):
        return torch.empty_like(x).view(-1).view_as(x)  # allocation and views only

class Fallback(torch.nn.Module):
    def forward(self, x):
        return x.t().contiguous()  # allowed by name in Python; a copy kernel (aten.clone) at the dispatcher

x = torch.randn(8, 16)
out = guarded_call(Honest(), [x], Guard(candidate_file="model_new.py"), lambda: None)
assert out.shape == x.shape and bool(out.isnan().all()), "fresh memory is poisoned under the guard"
guard = Guard(candidate_file="model_new.py")
try:
    guarded_call(Fallback(), [x], guard, lambda: None)
except Exception as exc:
    print("refused:", exc)
print("ops:", [v.op for v in guard.violations])
print("dynamo imported:", "torch._dynamo" in sys.modules)
"""


def test_guarded_calls_refuse_torch_kernels_without_importing_dynamo():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "refused: fallback refused: torch op `aten.clone`" in proc.stdout, proc.stdout
    assert "dynamo imported: False" in proc.stdout, proc.stdout


def test_an_aten_overload_called_from_python_is_named_as_written():
    x = torch.randn(4)
    guard = Guard(candidate_file="model_new.py")
    with pytest.raises(GuardViolation, match=r"torch op `aten\.exp\.default` called in Python"), guard.active():
        torch.ops.aten.exp.default(x)
    assert [v.op for v in guard.violations] == ["aten.exp.default"]
