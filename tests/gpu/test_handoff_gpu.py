"""Outputs by descriptor on the GPU (evaluate/handoff.py, cudashare.py), marker `gpu`: an exported
CUDA allocation crosses to another process and is copied there device to device; through the
judge, in both sandbox modes, a right output is accepted, a wrong one refused and a forged layout
is tampering."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import PROBLEMS, ROOT, fast_options
from sources import cuda_candidate_source

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# The exporting side in a process of its own (as the candidate's is): a seeded output (a float32
# tensor of 3 GiB + 4 bytes when BIG, so the copy runs in more than one granule, and an int64 one)
EXPORTER = textwrap.dedent("""
    import os, socket, sys
    import torch
    from kcoder.evaluate.candidate.outbox import Outbox
    big = int(sys.argv[2])
    torch.manual_seed(7)
    out = (torch.randn((3 << 28) + 1 if big else 1000, device="cuda"), [torch.arange(5, device="cuda") * 3, 1.5])
    layout = Outbox(int(sys.argv[1]), "cuda").send(out)
    print(__import__("json").dumps(layout), flush=True)
    sys.stdin.read()  # keep the allocation alive until the reader is done
""")


def _expected(big: bool):
    torch.manual_seed(7)
    return (torch.randn((3 << 28) + 1 if big else 1000, device="cuda"), [torch.arange(5, device="cuda") * 3, 1.5])


@pytest.mark.parametrize("big", [False, True], ids=["small", "3GiB"])
def test_an_exported_output_is_copied_into_the_readers_memory(big):
    from kcoder.evaluate.harness import handoff

    mine, theirs = handoff.socket_pair()
    proc = subprocess.Popen([sys.executable, "-c", EXPORTER, str(theirs.fileno()), str(int(big))],
                            pass_fds=[theirs.fileno()], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    theirs.close()
    try:
        layout = json.loads(proc.stdout.readline())
        expected = _expected(big)
        ref_bytes = expected[0].nbytes + expected[1][0].nbytes
        handoff.validate(layout, handoff.bytes_bound(ref_bytes))
        got = handoff.receive_output(mine, layout, ref_bytes, "cuda")
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
        mine.close()
    assert got[1][1] == 1.5 and got[0].is_cuda and got[1][0].dtype == torch.int64
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1][0], expected[1][0])


# A bigger output, then a smaller one, from one exporting process (the judge's drawn batch sizes
# after the problem's own): the reader maps what the smaller one pads to.
SHRINKING = textwrap.dedent("""
    import json, sys
    import torch
    from kcoder.evaluate.candidate.outbox import Outbox
    box = Outbox(int(sys.argv[1]), "cuda")
    for n in (1 << 24, 1000):
        print(json.dumps(box.send(torch.arange(n, device="cuda", dtype=torch.float32))), flush=True)
        sys.stdin.readline()  # the reader has copied it
""")


def test_a_smaller_output_after_a_bigger_one_is_read_back():
    from kcoder.evaluate.harness import handoff

    mine, theirs = handoff.socket_pair()
    proc = subprocess.Popen([sys.executable, "-c", SHRINKING, str(theirs.fileno())], pass_fds=[theirs.fileno()],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    theirs.close()
    try:
        for n in (1 << 24, 1000):
            layout = json.loads(proc.stdout.readline())
            got = handoff.receive_output(mine, layout, n * 4, "cuda")
            assert torch.equal(got, torch.arange(n, device="cuda", dtype=torch.float32)), n
            proc.stdin.write("\n")
            proc.stdin.flush()
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
        mine.close()


def _eval(tmp_path: Path, body: str, sandbox: str, header: str = ""):
    from kcoder.evaluate import evaluate

    source = cuda_candidate_source(body)
    if header:
        source = source.replace("from torch.utils.cpp_extension import load_inline\n",
                                "from torch.utils.cpp_extension import load_inline\n" + header + "\n", 1)
    path = tmp_path / f"cand_{sandbox}_{abs(hash(body + header)) % 10**8}.py"
    path.write_text(source)
    return evaluate(PROBLEMS / "scale_add.py", path,
                    fast_options(device="cuda", sandbox=sandbox, static_checks=not header, stop_after="verify"))


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_outputs_by_descriptor_are_judged(tmp_path, sandbox):
    right = _eval(tmp_path, "return _ext.scale_add_relu(x, y, self.scale)", sandbox)
    assert right.status == "accepted", right.reason
    assert not any("went through a file" in n for n in right.notes), right.notes
    wrong = _eval(tmp_path, "return _ext.scale_add_relu(x, y, self.scale * 1.01)", sandbox)
    assert wrong.status == "rejected" and "wrong answer" in wrong.reason, wrong.reason
    forged = _eval(tmp_path, "return _ext.scale_add_relu(x, y, self.scale)", sandbox, header=FORGE)
    assert forged.status == "rejected" and "tampering" in forged.reason, forged.reason


# The candidate's code replaces how the worker describes its output: a misaligned offset.
FORGE = """import kcoder.evaluate.candidate.outbox as _outbox
_describe = _outbox.describe
def _forged(out, device):
    described = _describe(out, device)
    if described is not None:
        described[0]["tree"][3] = 3
    return described
_outbox.describe = _forged"""
