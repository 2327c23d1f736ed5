"""`kcoder profile` on the GPU machine (marker `gpu`): every example gives per-kernel ncu rows
with a roofline, a memory-bound example's DRAM traffic agrees with its measured time, and the
fallbacks (no ncu, ncu time limit) still give a kernel timeline. Prints the figures."""

from __future__ import annotations

import json
import time

import pytest
from helpers import ROOT, run_kcoder

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

EXAMPLES = sorted(p.parent for p in (ROOT / "examples").glob("*/solution_cuda.py") if not p.parent.name.startswith("_"))
MEMORY_BOUND = ["mse_loss", "softmax_rows"]  # elementwise_chain is issue-bound (SM 72%, DRAM 44%)


def _profile(example, *extra: str) -> tuple[dict, float]:
    started = time.monotonic()
    proc = run_kcoder("profile", str(example / "model.py"), str(example / "solution_cuda.py"), "--json", *extra)
    took = time.monotonic() - started
    assert proc.stdout.strip(), proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert proc.returncode == data["exit_code"], (proc.returncode, data)
    return data, took


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_every_example_has_kernel_rows_and_roofline(example):
    data, took = _profile(example)
    assert data["exit_code"] == 0, (data["messages"], data["error"], data["error_log"])
    assert data["mode"] == "ncu", f"ncu did not run: {data['messages']}"
    assert data["limits"] and data["limits"]["copy_bytes_per_s"] > 1e11 and data["limits"]["fp32_flops_per_s"] > 1e12
    assert data["kernels"], "no kernel rows"
    for k in data["kernels"]:
        assert k["name"] and k["duration_ns"] > 0 and k["registers"] and k["sm_pct"] is not None, k["name"]
        assert k["dram_pct"] is not None and k["achieved_occupancy_pct"] is not None, k["name"]
        assert k["roofline"] and k["roofline"]["bound"] in ("memory", "compute", "latency"), k["name"]
        assert k["roofline"]["limit_pct"] >= 0
    assert data["compiler"]["kernels"], data["compiler"]
    assert any(k["compiler"] for k in data["kernels"]), "no ncu row matched a ptxas entry"
    print(f"\nPROFILE {example.name}: {took:.1f} s wall ({data['seconds']})")
    for k in data["kernels"]:
        r = k["roofline"]
        print(f"  #{k['id']} {k['name'][:60]}: {k['duration_ns'] / 1e3:.1f} us, SM {k['sm_pct']:.0f}%, DRAM "
              f"{k['dram_pct']:.0f}%, {k['dram_bytes'] / 1e6:.2f} MB, {r['bound']}-bound "
              f"{r['limit_pct']:.0f}% of limit, {k['registers']:.0f} regs, rules {len(k['rules'])}")


@pytest.mark.parametrize("name", MEMORY_BOUND)
def test_memory_bound_traffic_consistent_with_measured_time(name):
    # ncu's DRAM bytes over the forward's device time measured without ncu (the profile's own
    # torch.profiler pass, L2 flushed) must agree with ncu's own bytes over its own durations,
    # and neither may beat the measured copy bandwidth.
    data, _ = _profile(ROOT / "examples" / name)
    assert data["mode"] == "ncu", data["messages"]
    assert data["timeline"], data["notes"]
    dram = sum(k["dram_bytes"] for k in data["kernels"])
    ncu_ns = sum(k["duration_ns"] for k in data["kernels"])
    measured_ns = 1e3 * sum(t["us_per_forward"] for t in data["timeline"])
    main = max(data["kernels"], key=lambda k: k["duration_ns"])
    copy_bw = data["limits"]["copy_bytes_per_s"]
    ncu_bw, measured_bw = dram / (ncu_ns * 1e-9), dram / (measured_ns * 1e-9)
    print(f"\nMEMORY {name}: DRAM {dram / 1e6:.2f} MB (problem moves >= {data['min_bytes'] / 1e6:.2f} MB), "
          f"ncu {ncu_ns / 1e3:.1f} us -> {ncu_bw / 1e12:.2f} TB/s ({100 * ncu_bw / copy_bw:.0f}% of copy); "
          f"measured {measured_ns / 1e3:.1f} us -> {measured_bw / 1e12:.2f} TB/s ({100 * measured_bw / copy_bw:.0f}%); "
          f"copy ceiling {copy_bw / 1e12:.2f} TB/s; main kernel {main['roofline']['bound']} "
          f"{main['roofline']['limit_pct']:.0f}%")
    assert main["roofline"]["bound"] == "memory"
    assert abs(ncu_bw / measured_bw - 1) < 0.10, "ncu's traffic per time disagrees with the measured time"
    assert measured_bw <= 1.10 * copy_bw and ncu_bw <= 1.10 * copy_bw
    # Outputs still dirty in the 60 MB L2 when a kernel ends are written back after it, so DRAM
    # bytes may fall short of what the problem moves; they can never exceed it by much.
    assert 0.5 * data["min_bytes"] <= dram <= 1.10 * data["min_bytes"]


def test_without_ncu_falls_back_to_timeline():
    data, _ = _profile(ROOT / "examples" / "mse_loss", "--ncu", "/nonexistent/ncu")
    assert data["exit_code"] == 0 and data["mode"] == "timeline"
    assert "not found" in data["messages"][0] and data["timeline"]
    assert all(t["us_per_forward"] > 0 for t in data["timeline"])


def test_ncu_time_limit_then_timeline():
    data, _ = _profile(ROOT / "examples" / "softmax_rows", "--ncu-timeout", "3")
    assert data["mode"] == "timeline" and "exceeded its 3 s limit" in data["messages"][0], data["messages"]
    assert 3 <= data["seconds"]["ncu"] < 10, data["seconds"]  # stopped at its limit, not when it finished
    assert data["timeline"] and all(t["us_per_forward"] > 0 for t in data["timeline"])


def test_summary_is_compact():
    example = ROOT / "examples" / "linear_bias_relu"
    proc = run_kcoder("profile", str(example / "model.py"), str(example / "solution_cuda.py"), "--summary")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert len(proc.stdout) <= 7600 and "bound" in proc.stdout and "compiler" in proc.stdout
    print("\n" + proc.stdout)
