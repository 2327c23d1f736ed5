"""optimize's roofline preflight (cpu target): before any model call it measures the reference's
baselines and speed of light, and stops with its reason when the target over torch.compile is
beyond what the SOL allows (unless --keep-going, which carries the figures into the prompt).

The decision is made deterministic by injecting the device's ceilings: the tests run with a
private KCODER_CACHE whose profile/devices.json says this CPU copies at 1 GB/s. The problem
is a pure copy of 64 MiB (128 MiB moved at least), so its SOL is 134 ms and torch.compile, which
takes a few tens of ms here, is already "at" the SOL: no kernel could be 1.05x faster than it
by these ceilings. Everything else is real: the reference process, the baselines' timing,
torch.compile, the CLI, the report.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from helpers import fast_options, run_kcoder
from rich.console import Console

from kcoder.settings import Settings

pytestmark = pytest.mark.slow

COPY_PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """A pure copy: any implementation moves its input and output once, nothing else."""

    def forward(self, x):
        return x.clone()


def get_inputs():
    return [torch.randn(4096, 4096)]


def get_init_inputs():
    return []
'''
SLOW_COPY_BPS = 1e9


@pytest.fixture
def slow_device(tmp_path, monkeypatch) -> Path:
    """A private cache whose ceilings for this CPU are injected (see the module docstring)."""
    import torch

    from kcoder.device_limits import CPU_CURVE_BYTES, device_key
    from kcoder.trust import signed

    cache = tmp_path / "cache"
    (cache / "profile").mkdir(parents=True)
    limits = {"device": device_key(torch, "cpu"), "copy_bytes_per_s": SLOW_COPY_BPS, "fp32_flops_per_s": 1e11,
              "method": "injected by the test",
              "size_rates": {str(2 * 4096 * 4096 * 4): SLOW_COPY_BPS},  # at the problem's own size as well
              "copy_curve": {str(size): SLOW_COPY_BPS for size in CPU_CURVE_BYTES}}  # every working set: no re-measure
    monkeypatch.setenv("KCODER_CACHE", str(cache))
    # signed with this cache's key, as kcoder's own measurement is (an unsigned entry is not believed)
    (cache / "profile" / "devices.json").write_text(json.dumps({limits["device"]: signed(limits)}))
    problem = tmp_path / "proj" / "copy.py"
    problem.parent.mkdir()
    problem.write_text(COPY_PROBLEM)
    return problem


def test_optimize_stops_before_any_model_call_when_the_target_is_out_of_reach(slow_device, scripted):
    server = scripted([])
    proc = run_kcoder("optimize", str(slow_device), "--model", "openai/scripted", "--api-base", server.base_url,
                      "--device", "cpu", env={"KCODER_API_KEY": "test"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    text = " ".join(proc.stdout.split())
    assert "the target is out of reach" in text and "Nothing was tried" in text
    assert server.requests == []  # stopped before the first turn
    run_dir = next((slow_device.parent / ".kcoder" / "runs").iterdir())
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "out_of_reach" and report["turns"] == 0 and report["best"] is None
    ref = report["reference"]
    sol_us = 2 * 4096 * 4096 * 4 / SLOW_COPY_BPS * 1e6
    assert ref["min_bytes"] == 2 * 4096 * 4096 * 4 and ref["sol_us"] == pytest.approx(sol_us)
    assert ref["compile_headroom"] == pytest.approx(ref["compile_us"] / sol_us) and ref["compile_headroom"] < 1.05
    room = ("torch.compile is at the hardware limit" if ref["compile_headroom"] <= 1 else
            f"no kernel can be more than {ref['compile_headroom']:.2f}x faster than torch.compile")
    assert room in report["message"]
    assert "speed of light" in (run_dir / "report.md").read_text()
    assert not list((run_dir / "candidates").glob("*.py"))


def test_keep_going_runs_with_the_sol_in_the_system_prompt(slow_device, scripted, tmp_path, monkeypatch):
    from agent.llm_server import call, reply

    from kcoder.agent.optimize import optimize
    from kcoder.ui import Output

    monkeypatch.setenv("KCODER_API_KEY", "test")  # what kcoder sends to an --api-base server
    server = scripted([reply("Compile is at the speed of light already.", call("finish"))])
    settings = Settings.from_eval_options(fast_options(), model="openai/scripted", api_base=server.base_url,
                                          keep_going=True, max_turns=1, tool_call="native",
                                          runs_dir=tmp_path / "runs")
    out = io.StringIO()
    code = optimize(slow_device, settings, Output(Console(file=out, width=200)))
    assert code == 1  # no verified candidate
    assert "(going on: --keep-going)" in out.getvalue()
    system = server.requests[0]["messages"][0]["content"]
    assert "Speed of light (SOL):" in system and "memory-bound" in system
    assert "over torch.compile is possible" in system
    run_dir = next((tmp_path / "runs").iterdir())
    assert json.loads((run_dir / "preflight.json").read_text())["sol_us"] == pytest.approx(
        2 * 4096 * 4096 * 4 / SLOW_COPY_BPS * 1e6)
