"""`kcoder profile` without a GPU: ncu CSV parsing, roofline math, the ptxas report, and every
degraded path (ncu missing, no permission, hanging, unusable counters, no GPU) with fake ncu
scripts and a stand-in for the GPU-side target process.

The h200_* fixtures are real Nsight Compute 2025.3 pages and cuobjdump output captured on the
H200 from the four examples (tests/fixtures/ncu/README.md says how); the exact-number tests read
the mse_loss capture. SYNTHETIC_* are hand-written for what a healthy run never shows (n/a and
NaN counters). The ptxas fixture is real nvcc 13.0 output.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import PROBLEMS, ROOT, run_kcoder

from kcoder.device_limits import DeviceLimits, load_limits, roofline, save_limits
from kcoder.procs import RunResult
from kcoder.procs import run as run_limited
from kcoder.profile import profiler as prof
from kcoder.profile.ncu_parse import NcuParseError, parse_details, parse_ncu, parse_number, parse_raw, to_base_units
from kcoder.profile.options import ProfileOptions
from kcoder.profile.profiler import ProfileReport, profile_candidate, run_ncu
from kcoder.profile.ptxas import (
    CompilerReport,
    compile_report,
    function_base,
    parse_cuobjdump,
    parse_ptxas,
    pick_arch,
)
from kcoder.profile.render import SUMMARY_CHARS, issue_bound, summary_text

FIX = ROOT / "tests" / "fixtures" / "ncu"
RAW = FIX / "h200_mse_loss_raw.csv"
DETAILS = FIX / "h200_mse_loss_details.csv"
PTXAS_OUT = FIX / "ptxas_v_cuda13.0_sm80_sm90.txt"
H200 = DeviceLimits(device="NVIDIA H200", copy_bytes_per_s=4.2e12, fp32_flops_per_s=50e12)
MSE = ROOT / "examples" / "mse_loss"
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)


# --- parsing -----------------------------------------------------------------------------------
def test_numbers_and_units():
    assert parse_number("1,234.5") == 1234.5
    assert parse_number("n/a") is None and parse_number("NaN") is None and parse_number("") is None
    assert parse_number("inf") is None
    assert to_base_units(31.55, "us") == pytest.approx(31550) and to_base_units(2.0, "msecond") == 2e6
    assert to_base_units(134.22, "Mbyte") == pytest.approx(134.22e6)
    assert to_base_units(1.5, "Kbyte/block") == 1500 and to_base_units(88.0, "%") == 88.0
    assert to_base_units(3.2, "Gbyte/second") == pytest.approx(3.2e9)


def test_raw_page_per_kernel_numbers():
    k0, k1 = parse_raw(RAW.read_text())
    assert (k0.id, k0.mangled) == (0, "_Z21sqdiff_partial_kernelILb1EEvPKfS1_lPf")
    # Reads the two 4096x4096 fp32 inputs (134.2 MB) once; the partial sums are the writes.
    assert k0.duration_ns == 33376 and k0.dram_read_bytes == 134227456 and k0.dram_write_bytes == 2557696
    assert k0.fp32_flops == 52663296  # 2*FFMA + FADD + FMUL: ~3 per element of 16.8 M
    assert (k0.sm_pct, k0.dram_pct, k0.memory_pct) == (8.62, 85.25, 85.25)
    assert (k0.achieved_occupancy_pct, k0.theoretical_occupancy_pct) == (65.24, 75)
    assert (k0.registers, k0.smem_per_block, k0.block, k0.grid) == (40, 32, "(256, 1, 1)", "(1056, 1, 1)")
    # the per-issue ratio family; "selected" is not a stall and pc-sampling counts do not override
    assert k0.stalls[0] == ("long_scoreboard", 97.09)
    assert "selected" not in dict(k0.stalls)
    reason, cycles, share = k0.stall_share()[0]
    assert reason == "long_scoreboard" and share == pytest.approx(92.38, abs=0.01)
    assert k1.grid_blocks == 1 and k1.stalls[0][0] == "long_scoreboard" and k1.usable() and not k1.unusable


def test_details_page_rules_and_metrics():
    k0, k1 = parse_details(DETAILS.read_text())
    assert k0.name.startswith("void sqdiff_partial_kernel<1>(") and k0.mangled is None
    assert k0.duration_ns == pytest.approx(33376) and k0.registers == 40 and k0.block_threads == 256
    assert k0.dram_read_bytes == pytest.approx(134.23e6, rel=1e-3)
    assert k0.dram_write_bytes == pytest.approx(2.56e6, rel=1e-2)
    assert [r.name for r in k0.rules] == ["SOLBottleneck", "CPIStall", "CPIStall", "CPIStall", "LaunchConfiguration",
                                          "TheoreticalOccupancy"]
    cpi = k0.rules[2]
    assert (cpi.type, cpi.section, cpi.speedup_type, cpi.speedup_pct) == ("OPT", "WarpStateStats", "local", 92.37)
    assert {r.name for r in k1.rules} == {"SOLBottleneck", "CPIStall", "LaunchConfiguration", "AchievedOccupancy"}
    line = next(r for r in k1.rules if r.name == "LaunchConfiguration").one_line()
    assert "\n" not in line and len(line) < 300 and "docs.nvidia.com" not in line


def test_pages_merge_by_launch_id():
    k0, k1 = parse_ncu(RAW.read_text(), DETAILS.read_text())
    assert k0.name.startswith("void sqdiff_partial_kernel<1>") and k0.mangled.startswith("_Z21")
    assert k0.duration_ns == 33376 and k0.dram_write_bytes == 2557696  # raw numbers win over rounded ones
    assert len(k0.rules) == 6 and len(k1.rules) == 4


def test_unusable_counters_recorded_not_guessed():
    (k,) = parse_raw((FIX / "SYNTHETIC_unusable_raw.csv").read_text())  # also has ==PROF== lines first
    assert not k.usable() and k.duration_ns is None and set(k.unusable) == {"duration_ns", "dram_read_bytes"}


def test_not_csv_is_an_error():
    with pytest.raises(NcuParseError):
        parse_raw("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission\n")


REAL_PAGES = sorted(p for p in FIX.glob("*.csv") if not p.name.startswith("SYNTHETIC"))


@pytest.mark.parametrize("page", REAL_PAGES, ids=[p.name for p in REAL_PAGES])
def test_real_capture_parses(page):
    """Captured on the H200 (added by the lead): every launch has a name and a duration."""
    kernels = parse_details(page.read_text()) if "details" in page.name else parse_raw(page.read_text())
    assert kernels and all(k.name and k.usable() and k.duration_ns > 0 for k in kernels)
    if "details" in page.name:
        assert any(k.rules for k in kernels)
    else:
        assert all(k.dram_bytes is not None and k.registers for k in kernels)


REAL_PAIRS = sorted(p for p in REAL_PAGES if p.name.endswith("_raw.csv")
                    and p.with_name(p.name.replace("_raw.csv", "_details.csv")).exists())


@pytest.mark.parametrize("raw", REAL_PAIRS, ids=[p.name for p in REAL_PAIRS])
def test_real_capture_pages_join(raw):
    """Both pages of one H200 capture: demangled names, rules joined, facts of the example."""
    kernels = parse_ncu(raw.read_text(), raw.with_name(raw.name.replace("_raw.csv", "_details.csv")).read_text())
    assert all(not k.name.startswith("_Z") for k in kernels)
    assert any(k.rules for k in kernels)
    main = max(kernels, key=lambda k: k.duration_ns)
    point = roofline(main.dram_bytes, main.fp32_flops, main.duration_ns, H200)
    if any(n in raw.name for n in ("mse_loss", "softmax_rows")):
        assert main.dram_pct > main.sm_pct and point.bound == "memory", "a streaming example is memory-bound"
    if "elementwise_chain" in raw.name:
        # erff, expf and an IEEE division per element: SM issue, not DRAM, is the busiest unit,
        # which the FFMA/FADD/FMUL roofline alone would miss
        assert main.sm_pct > main.dram_pct and issue_bound(main, point)
    if "linear_bias_relu" in raw.name:
        assert sum(k.fp32_flops or 0 for k in kernels) >= 2 * 1024**3 * 0.9  # the 1024^3 GEMM's FMAs


def test_function_base_matches_both_spellings():
    assert function_base("_Z21sqdiff_partial_kernelILb1EEvPKfS1_lPf") == "sqdiff_partial_kernel"
    assert function_base("void sqdiff_partial_kernel<true>(const float *, long)") == "sqdiff_partial_kernel"
    assert function_base("_ZN2ns6kernelILi4EEEvPf") == "kernel"
    assert function_base("void ns::kernel<4>(float *)") == "kernel"
    assert function_base("saxpy") == "saxpy" and function_base("saxpy(float, const float *)") == "saxpy"


# --- roofline ----------------------------------------------------------------------------------
def test_roofline_memory_compute_latency():
    mem = roofline(134.25e6, 54.5e6, 31552, H200)
    assert mem.bound == "memory" and mem.limit_pct == pytest.approx(100 * 134.25e6 / 31552e-9 / 4.2e12)
    gemm = roofline(12e6, 2 * 1024**3, 60_000, H200)  # 1024^3 fp32 GEMM in 60 us
    assert gemm.bound == "compute" and gemm.limit_pct == pytest.approx(100 * 2 * 1024**3 / 60e-6 / 50e12)
    tiny = roofline(4384, 1057, 4128, H200)
    assert tiny.bound == "latency" and "latency-bound" in tiny.describe()
    assert roofline(None, 1.0, 10.0, H200) is None and roofline(1.0, 1.0, 10.0, None) is None


def test_device_limits_cached_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv("KCODER_CACHE", str(tmp_path))
    assert load_limits("NVIDIA H200") is None
    save_limits(H200)
    save_limits(DeviceLimits(device="Other GPU", copy_bytes_per_s=1e12, fp32_flops_per_s=1e13))
    assert load_limits("NVIDIA H200") == H200
    data = json.loads((tmp_path / "profile" / "devices.json").read_text())
    assert set(data) == {"NVIDIA H200", "Other GPU"}
    assert H200.ridge_flop_per_byte == pytest.approx(50e12 / 4.2e12)


# --- compiler report ---------------------------------------------------------------------------
def _check_fixture_kernels(kernels):
    by = {k.name: k for k in kernels}
    spill = by["_Z10spill_regsPK6float4Pfi"]
    assert spill.registers == 32 and spill.spills and spill.spill_store_bytes > 0 and spill.stack_frame_bytes > 0
    local = by["_Z11local_arrayPKfPfi"]
    assert local.stack_frame_bytes == 256 and not local.spills
    tiled = by["_Z5tiledILi256EEvPKfPf"]
    assert (tiled.smem_bytes, tiled.barriers) == (1024, 1) and not tiled.spills
    assert by["saxpy"].smem_bytes == 0 and by["saxpy"].registers <= 16


def test_ptxas_parser_on_saved_real_output():
    kernels = parse_ptxas(PTXAS_OUT.read_text())
    assert len(kernels) == 8 and {k.arch for k in kernels} == {"sm_80", "sm_90"}
    sm90 = pick_arch(kernels, "sm_90")
    assert len(sm90) == 4
    _check_fixture_kernels(sm90)
    sm80 = pick_arch(kernels, "sm_80")
    assert next(k for k in sm80 if k.name == "saxpy").cmem0_bytes == 380  # older wording keeps cmem
    assert pick_arch(kernels, "sm_120") == sm90  # absent arch: the highest compiled


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_ptxas_parser_on_live_nvcc_output(tmp_path):
    out = subprocess.run([NVCC, "-c", "-gencode=arch=compute_90,code=sm_90", "-Xptxas", "-v",
                          str(FIX / "ptxas_kernels.cu"), "-o", str(tmp_path / "k.o")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    _check_fixture_kernels(parse_ptxas(out.stdout + out.stderr))


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_compile_report_from_build_dir_is_cached(tmp_path, monkeypatch):
    """The recompile reads nvcc and flags from build.ninja, as torch writes them."""
    monkeypatch.setenv("KCODER_CACHE", str(tmp_path / "cache"))
    build = tmp_path / "ext-0123"
    build.mkdir()
    shutil.copy(FIX / "ptxas_kernels.cu", build / "cuda.cu")
    (build / "build.ninja").write_text(
        f"ninja_required_version = 1.3\nnvcc = {NVCC}\n"
        "cuda_cflags = -DTORCH_EXTENSION_NAME=ext --expt-relaxed-constexpr -gencode=arch=compute_90,code=sm_90 "
        "--compiler-options '-fPIC' -O3\ncuda_post_cflags = \n\n"
        "rule cuda_compile\n  command = $nvcc $cuda_cflags -c $in -o $out $cuda_post_cflags\n\n"
        f"build cuda.cuda.o: cuda_compile {build}/cuda.cu\n")
    first = compile_report(build, timeout_s=300)
    assert first.error is None and not first.cached
    _check_fixture_kernels(first.kernels)
    second = compile_report(build, timeout_s=300)
    assert second.cached and [k.name for k in second.kernels] == [k.name for k in first.kernels]


def test_compile_report_failures_are_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("KCODER_CACHE", str(tmp_path / "cache"))
    build = tmp_path / "ext"
    build.mkdir()
    assert "no CUDA compile step" in compile_report(build).error
    (build / "cuda.cu").write_text("__global__ void k() { this is not cuda; }\n")
    (build / "build.ninja").write_text(f"nvcc = {NVCC or 'nvcc'}\ncuda_cflags = -O3\n"
                                       f"build cuda.cuda.o: cuda_compile {build}/cuda.cu\n")
    err = compile_report(build, timeout_s=120).error
    assert err.startswith("ptxas report: the recompile failed") and "\n" not in err


REAL_CUOBJDUMP = sorted(p for p in FIX.glob("*cuobjdump*.txt") if not p.name.startswith("SYNTHETIC"))


@pytest.mark.parametrize("dump", REAL_CUOBJDUMP, ids=[p.name for p in REAL_CUOBJDUMP])
def test_real_cuobjdump_parses(dump):
    kernels = parse_cuobjdump(dump.read_text())
    assert kernels and all(k.registers and k.arch.startswith("sm_") for k in kernels)


def test_cuobjdump_parser():
    real = parse_cuobjdump((FIX / "h200_cuobjdump_mse_loss.txt").read_text())
    assert [(k.name[:20], k.registers, k.smem_bytes, k.arch) for k in real] == [
        ("_Z21sqdiff_partial_k", 18, 1056, "sm_90a"), ("_Z21sqdiff_partial_k", 40, 1056, "sm_90a"),
        ("_Z15finalize_kernelP", 24, 1280, "sm_90a")]
    # hand-written: a kernel with a stack array (LOCAL > 0), which no example has
    kernels = parse_cuobjdump((FIX / "SYNTHETIC_cuobjdump_resource_usage.txt").read_text())
    assert [k.registers for k in kernels] == [18, 30, 26]
    assert kernels[2].local_bytes == 8 and kernels[0].smem_bytes == 256 and kernels[0].arch == "sm_90"


# --- subprocess limits and fake ncu ------------------------------------------------------------
def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _fake_ncu(tmp_path: Path, body: str) -> str:
    path = tmp_path / "bin" / "ncu"
    path.parent.mkdir(exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


TARGET = [sys.executable, "-c", "pass"]


def test_time_limit_kills_ncu_and_its_children(tmp_path):
    pidfile = tmp_path / "child.pid"
    ncu = _fake_ncu(tmp_path, f"sleep 60 &\necho $! > {pidfile}\nsleep 60\n")
    started = time.monotonic()
    outcome = run_ncu(ncu, TARGET, tmp_path, ProfileOptions(ncu_timeout_s=2), tmp_path)
    assert time.monotonic() - started < 20
    assert not outcome.ok and "exceeded its 2 s limit" in outcome.message
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the sleeping child of ncu survived the time limit"


def test_run_limited_reports_output_and_rc(tmp_path):
    res = run_limited(["sh", "-c", "echo hello; exit 3"], 10, tmp_path)
    assert (res.rc, res.output.strip(), res.timed_out) == (3, "hello", False)
    assert run_limited(["/nonexistent/tool"], 10, tmp_path).rc is None


def test_permission_error_explained(tmp_path):
    ncu = _fake_ncu(tmp_path, 'echo "==PROF== Connected to process 1"\n'
                              'echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA '
                              'GPU Performance Counters on the target device 0."\nexit 1\n')
    outcome = run_ncu(ncu, TARGET, tmp_path, ProfileOptions(), tmp_path)
    assert not outcome.ok and "ERR_NVGPUCTRPERM" in outcome.message
    assert "NVreg_RestrictProfilingToAdminUsers" in outcome.message


def test_no_kernels_in_range_explained(tmp_path):
    ncu = _fake_ncu(tmp_path, 'echo "==WARNING== No kernels were profiled."\n')
    outcome = run_ncu(ncu, TARGET, tmp_path, ProfileOptions(), tmp_path)
    assert not outcome.ok and "no kernel inside NVTX range" in outcome.message


SERVE_PAGES = """case " $* " in
  *" --import "*) case " $* " in *" --page raw "*) cat {raw};; *) cat {details};; esac;;
  *) while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done
     echo "==PROF== Connected to process 1"; : > "$out.ncu-rep";;
esac
"""


def test_fake_ncu_success_path_parses_both_pages(tmp_path):
    ncu = _fake_ncu(tmp_path, SERVE_PAGES.format(raw=RAW, details=DETAILS))
    outcome = run_ncu(ncu, TARGET, tmp_path, ProfileOptions(save_prefix=str(tmp_path / "kept" / "h200_mse")), tmp_path)
    assert outcome.ok, outcome.message
    assert [k.id for k in outcome.kernels] == [0, 1] and outcome.kernels[0].rules
    assert (tmp_path / "kept" / "h200_mse_raw.csv").read_text() == RAW.read_text()
    assert (tmp_path / "kept" / "h200_mse_details.csv").exists() and (tmp_path / "kept" / "h200_mse.ncu-rep").exists()
    cmd = " ".join(outcome.command)
    for part in ("--clock-control none", "--nvtx --nvtx-include kcoder_candidate/", "--section WarpStateStats",
                 "dram__bytes_read.sum,dram__bytes_write.sum", "_ffma_pred_on.sum", " -o "):
        assert part in cmd


def test_full_adds_sections():
    from kcoder.profile.ncu_run import ncu_profile_command

    short = ncu_profile_command("ncu", Path("/tmp/r"), TARGET)
    full = ncu_profile_command("ncu", Path("/tmp/r"), TARGET, full=True)
    assert "SchedulerStats" not in short and "SchedulerStats" in full and full[-3:] == TARGET


def test_unusable_counters_fall_back(tmp_path):
    ncu = _fake_ncu(tmp_path, SERVE_PAGES.format(raw=FIX / "SYNTHETIC_unusable_raw.csv", details="/dev/null"))
    outcome = run_ncu(ncu, TARGET, tmp_path, ProfileOptions(), tmp_path)
    assert not outcome.ok and outcome.message.startswith("ncu returned unusable counters")


# --- the whole flow, with a stand-in for the GPU-side target ---------------------------------------
PREP_GPU = {"gpu": True, "torch_version": "2.13", "torch_cuda": "13.0", "device_name": "NVIDIA H200",
            "arch": "sm_90", "min_bytes": 2 * 4096 * 4096 * 4 + 4, "builds": [],
            # the target loaded the candidate: ceilings it reports are never believed
            "limits": {**H200.__dict__, "copy_bytes_per_s": 1.0}, "notes": []}
TIMELINE = {"ok": True, "forwards": 5, "timeline": [
    {"name": "void sqdiff_partial_kernel<true>(const float*, const float*, long, float*)",
     "calls_per_forward": 1, "us_per_forward": 31.9, "us_per_call": 31.9},
    {"name": "finalize_kernel(const float*, int, long, float*)", "calls_per_forward": 1, "us_per_forward": 4.2,
     "us_per_call": 4.2}]}


@pytest.fixture
def fake_target(monkeypatch):
    """Replace the GPU-side process: `results[mode]` is what that mode reports."""
    results: dict[str, dict] = {"prepare": dict(PREP_GPU), "timeline": TIMELINE}
    calls: list[str] = []

    def run_target(mode, job, box, timeout_s):
        calls.append(mode)
        return results[mode], RunResult(0, "", False, 0.1)

    monkeypatch.setattr(prof, "_run_target", run_target)
    # the ceilings come from kcoder's own calibration process (profile/calibrate.py)
    monkeypatch.setattr(prof, "calibrate", lambda folder, timeout_s: ({"limits": H200.__dict__}, None))
    monkeypatch.setattr(prof, "compiler_reports", lambda dirs, timeout, arch, sandbox="auto": CompilerReport(
        kernels=pick_arch(parse_ptxas(PTXAS_OUT.read_text()), "sm_90")))
    return results, calls


def _profile(**options) -> ProfileReport:
    # the fake ncu lives in pytest's /tmp folder, which bwrap would hide: scrubbed environment only
    options.setdefault("sandbox", "none")
    return profile_candidate(MSE / "model.py", MSE / "solution_cuda.py", ProfileOptions(**options))


@pytest.mark.skipif(not __import__("kcoder.evaluate.sandbox").evaluate.sandbox.bwrap_usable(),
                    reason="bwrap unusable here")
def test_ncu_runs_inside_bwrap_from_wherever_it_is_installed(fake_target, tmp_path, monkeypatch):
    """Under bwrap, /tmp and HOME are private: ncu's own folder (here in pytest's /tmp) is bound
    in, the secret stays out, and its report comes back through the box."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-kcoder-test-secret-0123456789")
    from kcoder.evaluate import sandbox

    report_dir = tmp_path / "seen"  # bound writable into the sandbox for this test (the cache is read-only)
    report_dir.mkdir()
    seen = report_dir / f"ncu-seen-{time.time_ns()}.txt"
    plain = sandbox.bwrap_argv
    monkeypatch.setattr(sandbox, "bwrap_argv", lambda *a, **k: plain(*a, **k)[:-2]
                        + ["--bind", str(report_dir), str(report_dir)] + plain(*a, **k)[-2:])
    ncu = _fake_ncu(tmp_path, f'echo "${{OPENAI_API_KEY:-none}}|$HOME" >> {seen}\n'
                    + SERVE_PAGES.format(raw=RAW, details=DETAILS))
    report = _profile(ncu=ncu, sandbox="bwrap")
    assert report.mode == "ncu", report.messages
    key, home = seen.read_text().splitlines()[0].split("|")
    assert key == "none" and home != str(Path.home())


def test_ncu_and_its_target_run_confined(fake_target, tmp_path, monkeypatch):
    """ncu runs the candidate: it starts in the target's box, with the scrubbed environment."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-kcoder-test-secret-0123456789")
    seen = tmp_path / "seen.txt"
    ncu = _fake_ncu(tmp_path, f'echo "${{OPENAI_API_KEY:-none}}|$HOME|$(pwd)" >> {seen}\n'
                    + SERVE_PAGES.format(raw=RAW, details=DETAILS))
    report = _profile(ncu=ncu)
    assert report.mode == "ncu"
    key, home, cwd = seen.read_text().splitlines()[0].split("|")  # the profiling call comes first
    assert key == "none" and home != str(Path.home()) and Path(home).parent == Path(cwd)


def test_ncu_missing_falls_back_to_timeline(fake_target):
    report = _profile(ncu="/nonexistent/ncu")
    assert report.mode == "timeline" and report.exit_code == 0
    assert len(report.messages) == 1 and "not found" in report.messages[0] and "torch.profiler" in report.messages[0]
    text = summary_text(report)
    assert "kernel timeline" in text and "sqdiff_partial_kernel<true>: 31.9 us" in text
    assert "of measured copy bandwidth" in text and "compiler (ptxas -v)" in text and "SPILLS" in text
    assert fake_target[1] == ["prepare", "timeline"]


def test_ncu_permission_falls_back(fake_target, tmp_path):
    ncu = _fake_ncu(tmp_path, 'echo "==ERROR== ERR_NVGPUCTRPERM - no permission"\nexit 1\n')
    report = _profile(ncu=ncu)
    assert report.mode == "timeline" and "ERR_NVGPUCTRPERM" in report.messages[0]


def test_ncu_success_gives_rows_roofline_and_summary(fake_target, tmp_path):
    ncu = _fake_ncu(tmp_path, SERVE_PAGES.format(raw=RAW, details=DETAILS))
    report = _profile(ncu=ncu)
    assert report.mode == "ncu" and report.exit_code == 0 and not report.messages
    point = report.roofline[0]
    assert point.bound == "memory" and 70 < point.limit_pct < 120
    assert report.roofline[1].bound == "latency"
    text = summary_text(report)
    assert len(text) <= SUMMARY_CHARS
    for part in ("#0 sqdiff_partial_kernel<1>: 33.4 us", "DRAM 85%", "memory-bound", "% of the hardware limit",
                 "long_scoreboard 97.1", "advice: OPT CPIStall", "regs/thread", "occupancy 65% achieved"):
        assert part in text, part
    data = report.to_dict()
    assert data["kernels"][0]["roofline"]["bound"] == "memory" and "raw" not in data["kernels"][0]
    json.dumps(data)


def test_summary_stays_compact_with_many_kernels(fake_target, tmp_path):
    lines = RAW.read_text().splitlines()
    many = lines[:2] + [lines[2].replace('"0"', f'"{i}"', 1) for i in range(60)]
    (tmp_path / "many_raw.csv").write_text("\n".join(many) + "\n")
    ncu = _fake_ncu(tmp_path, SERVE_PAGES.format(raw=tmp_path / "many_raw.csv", details=DETAILS))
    text = summary_text(_profile(ncu=ncu))
    assert len(text) <= SUMMARY_CHARS and "more kernel launch(es) not shown" in text


def test_no_gpu_is_exit_2_with_compiler_report(fake_target):
    fake_target[0]["prepare"] = {"gpu": False, "torch_version": "2.13", "torch_cuda": "13.0", "builds": [],
                                 "notes": []}
    report = _profile()
    assert report.mode == "compiler-only" and report.exit_code == 2
    assert "needs a CUDA GPU" in report.messages[0] and report.compiler.kernels
    assert fake_target[1] == ["prepare"]


def test_build_failure_is_exit_1(fake_target):
    fake_target[0]["prepare"] = dict(PREP_GPU, error="compile error: cuda_sources:12: error: expected ';'",
                                      stage="build", log="cuda_sources:12: error: expected ';'")
    report = _profile()
    assert report.exit_code == 1 and "expected ';'" in summary_text(report)


def test_cpu_device_is_bad_usage():
    with pytest.raises(ValueError, match="CUDA kernels"):
        _profile(device="cpu")


# --- the CLI and the agent tool ------------------------------------------------------------------
def test_cli_without_gpu_says_so(tmp_path):
    candidate = tmp_path / "model_new.py"
    candidate.write_text("import torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
                         "    def __init__(self, scale):\n        super().__init__()\n")
    env = {"CUDA_VISIBLE_DEVICES": "", "KCODER_CACHE": str(tmp_path / "cache")}
    proc = run_kcoder("profile", str(PROBLEMS / "scale_add.py"), str(candidate), "--json", env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["mode"] == "compiler-only" and "needs a CUDA GPU" in data["messages"][0]
    # CPU-only torch cannot compile CUDA; CUDA torch finds no load_inline call in this candidate
    assert any(s in data["compiler"]["error"] for s in ("CPU-only build", "no load_inline call"))
    human = run_kcoder("profile", str(PROBLEMS / "scale_add.py"), str(candidate), env=env)
    assert human.returncode == 2 and "needs a CUDA GPU" in human.stdout


def test_cli_bad_usage_exit_2(tmp_path):
    proc = run_kcoder("profile", str(MSE / "model.py"), str(MSE / "solution_cuda.py"), "--device", "cpu")
    assert proc.returncode == 2 and "CUDA kernels" in proc.stderr
    proc = run_kcoder("profile", str(tmp_path / "missing.py"), str(MSE / "solution_cuda.py"), "--json")
    assert proc.returncode == 2 and "no such file" in json.loads(proc.stdout)["error"]


def test_agent_tool_returns_summary(tmp_path):
    from kcoder.agent.toolbox import ToolContext, discover_tools
    from kcoder.evaluate.options import EvalOptions
    from kcoder.workspace import Workspace

    problem = tmp_path / "scale_add.py"
    shutil.copy(PROBLEMS / "scale_add.py", problem)
    ws = Workspace.create(problem, runs_dir=tmp_path / "runs")
    (ws.root / "model_new.py").write_text("# candidate\n")
    seen = []

    def fake_profile(problem_path, candidate_path, options):
        seen.append((Path(problem_path), Path(candidate_path), options.full))
        return ProfileReport(problem=str(problem_path), candidate=str(candidate_path), mode="ncu",
                             device_name="NVIDIA H200", limits=H200)

    tool = discover_tools()["profile"]
    ctx = ToolContext(workspace=ws, options=EvalOptions(device="cuda"), extra={"profile": fake_profile})
    obs = tool.run({}, ctx)
    assert obs.ok and "profile (ncu)" in obs.text and "ceilings:" in obs.text
    assert seen == [(ws.reference, ws.root / "model_new.py", False)]
    cpu = tool.run({}, ToolContext(workspace=ws, options=EvalOptions(device="cpu")))
    assert not cpu.ok and "CUDA GPU" in cpu.text


def test_target_module_imports_without_torch_cuda():
    # the GPU-side entry point must at least import (and reject a bad mode) on any machine
    proc = subprocess.run([sys.executable, "-c", "import kcoder.profile.target as t; print(sorted(t.MODES))"],
                          capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.stdout.strip() == "['prepare', 'run', 'timeline']"
