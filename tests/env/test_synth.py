"""kcoder synth: compositions are a function of the seed, load as kcoder Problems, and the
checks (in a child process) drop constant or trivial outputs and KernelBench's own sequences."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from helpers import run_kcoder

from kcoder.env.catalogue import CATALOGUE
from kcoder.env.compose import Composition, choose_batch, draw, render
from kcoder.env.kbseq import kernelbench_sequences, op_sequence
from kcoder.env.synth import SynthOptions, _user_pointwise, check_in_child, load_ops, screen, synthesize
from kcoder.problem import load_problem

WIDE = dict(min_ms=1e-4, max_ms=1e6)  # the timing never rejects: a loaded test machine stays deterministic


def comp_of(*names: str, shape=(256,), seed: int = 0) -> Composition:
    rng, steps, now = random.Random(seed), [], shape
    for k, name in enumerate(names):
        op = CATALOGUE[name] if isinstance(name, str) else name
        steps.append(op.make(rng, now, k))
        now = steps[-1].shape
    comp = Composition(steps, shape, batch=64)
    comp.extra_inputs = [i for s in steps for i in s.inputs]
    return comp


def test_compositions_are_seeded_and_load_as_problems(tmp_path):
    families = set()
    for k in range(40):
        a, b = draw(random.Random(f"7:{k}")), draw(random.Random(f"7:{k}"))
        a.batch = b.batch = choose_batch(a, "cpu", 1, 100)
        assert render(a, "t") == render(b, "t") and 1 <= len(a.ops) <= 5
        path = tmp_path / f"t{k}.py"
        path.write_text(render(a, "t"))
        load_problem(path)
        families |= {CATALOGUE[o].family for o in a.ops}
        compile(path.read_text(), str(path), "exec")
    assert {"gemm", "conv", "pointwise", "reduction", "norm"} <= families


def test_constant_and_identity_outputs_are_rejected(tmp_path):
    opts = SynthOptions(device="cpu", **WIDE)
    constant = check_in_child(render(comp_of("softmax", "sum"), "c"), opts)  # softmax rows sum to 1
    assert not constant["ok"] and constant["reason"].startswith("constant output")
    identity = check_in_child(render(comp_of(_user_pointwise("ident", "x * 1.0")), "i"), opts)
    assert not identity["ok"] and identity["reason"] == "the output equals input 0"
    honest = check_in_child(render(comp_of("gelu", "sum"), "g"), opts)
    assert honest["ok"] and honest["output_shape"][0] == 64 and honest["eager_ms"] > 0
    failing = check_in_child(render(comp_of(_user_pointwise("bad", "x @ x")), "b"), opts)
    assert not failing["ok"] and failing["reason"].startswith("fails to run: RuntimeError")



def test_the_checks_see_no_credentials(tmp_path, monkeypatch):
    """The check runs the problem (an ops file's expressions are the user's text) with the
    candidate's scrubbed environment: a planted key does not reach it."""
    monkeypatch.setenv("FAKE_API_KEY", "sk-fake-0123456789abcdef")
    seen = tmp_path / "seen.txt"
    source = (f"import os\nopen({str(seen)!r}, 'w').write(repr(os.environ.get('FAKE_API_KEY')))\n"
              + render(comp_of("gelu", "sum"), "g"))
    result = check_in_child(source, SynthOptions(device="cpu", **WIDE))
    assert result["ok"], result
    assert seen.read_text() == "None"


KB_PROBLEM = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self, n, m):
        super().__init__()
        self.gemm = nn.Linear(n, m)
        self.act = nn.GELU()

    def forward(self, x):
        x = self.act(self.gemm(x))
        return torch.sum(x.view(x.size(0), -1), dim=1) * 2.0
'''


def test_kernelbench_sequences_are_dropped(tmp_path):
    (tmp_path / "KernelBench" / "level2").mkdir(parents=True)
    (tmp_path / "KernelBench" / "level2" / "1_Gemm_GELU_Sum.py").write_text(KB_PROBLEM)
    known = kernelbench_sequences(tmp_path)
    assert known == {("linear", "gelu", "sum", "mul"): "level2/1_Gemm_GELU_Sum.py"}
    ours = comp_of("linear", "gelu", "sum", "scale")
    assert op_sequence(render(ours, "x")) == ["linear", "gelu", "sum", "mul"]
    reason = screen(ours, known, set())
    assert reason == "KernelBench has this op sequence: level2/1_Gemm_GELU_Sum.py"
    with pytest.raises(ValueError, match="not a KernelBench checkout"):
        kernelbench_sequences(tmp_path / "KernelBench" / "level2")


def test_ops_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "ops.json"
    bad.write_text('["relu", "warp_drive"]')
    with pytest.raises(ValueError, match=r"ops.json: unknown op\(s\) warp_drive"):
        load_ops(bad)
    bad.write_text("{nope")
    with pytest.raises(ValueError, match="ops.json: not a readable JSON"):
        load_ops(bad)
    bad.write_text('{"use": ["linear", "relu"], "pointwise": {"sin": "torch.sin(x)"}}')
    assert set(load_ops(bad)) == {"linear", "relu", "sin"}
    proc = run_kcoder("synth", "--n", "1", "--device", "cpu", "--ops", str(tmp_path / "none.json"),
                      "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "none.json" in proc.stderr
    if not Path("/dev/nvidiactl").exists():
        with pytest.raises(ValueError, match="no NVIDIA GPU"):
            SynthOptions(device="cuda").validate()


def test_synth_is_deterministic_and_writes_a_manifest(tmp_path):
    ops = tmp_path / "ops.json"
    ops.write_text('["relu", "gelu", "tanh", "sum", "mean", "softmax", "layer_norm", "scale", "mse_loss"]')
    first = tmp_path / "a"
    proc = run_kcoder("synth", "--n", "2", "--device", "cpu", "--seed", "5", "--ops", str(ops), "--out", str(first),
                      "--min-ms", "0.0001", "--max-ms", "1000000")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    second = synthesize(SynthOptions(n=2, out=tmp_path / "b", device="cpu", seed=5, ops=ops, jobs=2, **WIDE))
    manifest = json.loads((first / "manifest.json").read_text())
    files = sorted(p.name for p in first.glob("*.py"))
    assert files == sorted(t["file"] for t in manifest["tasks"]) == sorted(t["file"] for t in second["tasks"])
    for name in files:
        assert (first / name).read_text() == (tmp_path / "b" / name).read_text()
        load_problem(first / name)
    for task in manifest["tasks"]:
        assert task["eager_ms"] > 0 and task["input_shapes"] and set(task["ops"]) <= set(json.loads(ops.read_text()))
    assert all(r["reason"] for r in manifest["rejected"]) and manifest["attempts"] == 2 + len(manifest["rejected"])
    assert Path(first / manifest["tasks"][0]["file"]).read_text().startswith(f'"""{manifest["tasks"][0]["name"]}')
