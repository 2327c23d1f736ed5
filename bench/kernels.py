"""A quick, in-process look at generated kernels on the GPU (a developer's loop, not the judge).

    python bench/kernels.py --pairs pairs.txt [--jobs 8] [--json OUT.json]

pairs.txt: one "PROBLEM CANDIDATE" per line. Every candidate is built and checked first, in
parallel processes (kcoder's content-keyed build wrapper, so builds never race; a crash stays in
its process): 3 seeded input sets against the problem's Model with the same weights. Then, one
at a time in this process, each verified pair is timed with CUDA events, the L2 flushed before
every call, side by side with eager and torch.compile (default mode). Prints per pair: times,
speed-ups, the share of the memory speed of light (bytes of inputs + parameters + outputs
over the measured device-to-device copy rate, at 1 GiB and at the problem's own size,
whichever is faster) for the candidate and for torch.compile.
The verdicts that count come from `kcoder eval` / `kcoder suite`; this measures fast.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def _prepare() -> None:
    from kcoder.build.inline import install_build_wrapper, prepare_environment, set_arch_for_device

    prepare_environment("cuda")
    set_arch_for_device()
    install_build_wrapper()
    import torch

    torch.set_default_device("cuda")  # get_inputs' randn straight on the GPU (KernelBench's are GBs)


def prepare(pair: tuple[str, str]) -> dict:
    """Build and check one pair in a child process: its JSON line, or why it failed."""
    env = dict(os.environ, MAX_JOBS="2")
    try:
        done = subprocess.run([sys.executable, __file__, "--prepare-one", *pair], capture_output=True, text=True,
                              env=env, timeout=900)
    except subprocess.TimeoutExpired:
        return {"ok": False, "why": "build/check timed out"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"ok": False, "why": f"rc={done.returncode}: " + (done.stderr.strip().splitlines() or ["?"])[-1][:300]}


def _tensors(values, device):
    import torch

    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def _time(fn, args, flush, budget_s: float = 0.4) -> float:
    """Median microseconds per call, the L2 flushed before each (events around the call only)."""
    import torch

    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    times, start = [], time.perf_counter()
    while len(times) < 10 or (time.perf_counter() - start < budget_s and len(times) < 300):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(*args)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000)
    return statistics.median(times)


def copy_rate(nbytes: int, flush) -> float:
    """Bytes moved (read + written) per microsecond by a device-to-device copy of nbytes."""
    import torch

    n = max(1, nbytes // 8)
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    us = _time(lambda: dst.copy_(src), [], flush, 0.2)
    return 2 * src.numel() * 4 / us


def _nbytes(values) -> int:
    import torch

    flat = values if isinstance(values, (list, tuple)) else [values]
    return sum(v.numel() * v.element_size() for v in flat if isinstance(v, torch.Tensor))


def _candidate(candidate: Path):
    """Exec (and so build) a candidate under a module name of its own, so several load in one process."""
    text = candidate.read_text().replace('name="kcoder_builtin_cuda"', f'name="kb_{candidate.stem[:40]}"')
    cand = type(sys)("kc_candidate")
    exec(compile(text, str(candidate), "exec"), cand.__dict__)  # noqa: S102  a generated candidate, built here
    return cand


def _load(problem: Path, cand):
    import torch

    prob = _module(problem, "kc_problem")
    init = prob.get_init_inputs()
    torch.manual_seed(0)
    model = prob.Model(*init).cuda()  # training mode, as the judge runs it (batch norm's batch statistics)
    new = cand.ModelNew(*init).cuda()
    new.load_state_dict(model.state_dict())
    return prob, model, new


def _close(out, ref, chunk: int = 1 << 26) -> tuple[bool, float, float]:
    """The judge's strict fp32 rule (compare.py): |out - ref| <= 1e-4 (|ref| + rms(ref)), NaN equal;
    with the max abs error and the relative norm of the error. In chunks."""
    o, r = out.reshape(-1), ref.reshape(-1)
    if not r.is_floating_point():
        return bool((o == r).all()), 0.0, 0.0
    rms = max((r.double().nan_to_num(0.0).square().mean().item()) ** 0.5, 1e-30)
    ok, worst, num, den = True, 0.0, 0.0, 0.0
    for i in range(0, o.numel(), chunk):
        a, b = o[i:i + chunk].double(), r[i:i + chunk].double()
        d = (a - b).abs()
        both_nan = a.isnan() & b.isnan()
        ok = ok and bool(((d <= 1e-4 * (b.abs() + rms)) | both_nan).all())
        worst = max(worst, d.nan_to_num(1e30).max().item() if d.numel() else 0.0)
        num += d.nan_to_num(0.0).square().sum().item()
        den += b.nan_to_num(0.0).square().sum().item()
    return ok, worst, (num / den) ** 0.5 if den else 0.0


def verify(problem: Path, candidate: Path) -> dict:
    """Build (in parallel with other children), then check on the GPU one child at a time."""
    import fcntl

    import torch

    cand = _candidate(candidate)
    with open("/tmp/kernels_bench.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        prob, model, new = _load(problem, cand)
        worst = 0.0
        with torch.no_grad():
            for seed in (1, 2, 3):
                torch.manual_seed(seed)
                inputs = _tensors(prob.get_inputs(), "cuda")
                ref, out = model(*inputs), new(*inputs)
                refs, outs = (ref, out) if isinstance(ref, (list, tuple)) else ([ref], [out])
                for r, o in zip(refs, outs, strict=True):
                    if r.shape != o.shape or r.dtype != o.dtype:
                        return {"ok": False, "why": f"shape/dtype {tuple(o.shape)} {o.dtype} vs {tuple(r.shape)}"}
                    ok, err, rel = _close(o, r)
                    if not ok:
                        return {"ok": False, "why": f"mismatch (seed {seed}, max abs error {err:.3g}, rel {rel:.3g})"}
                    worst = max(worst, rel)
                del ref, out, refs, outs
                if seed == 3:
                    torch.compile(model)(*inputs)  # fills Inductor's caches: the timing process compiles fast
                del inputs
                torch.cuda.empty_cache()
    return {"ok": True, "rel_err": worst}


def measure(problem: Path, candidate: Path, flush, big_rate: float) -> dict:
    import torch

    prob, model, new = _load(problem, _candidate(candidate))
    with torch.no_grad():
        torch.manual_seed(1)
        inputs = _tensors(prob.get_inputs(), "cuda")
        compiled = torch.compile(model)
        eager_us = _time(model, inputs, flush)
        compile_us = _time(compiled, inputs, flush)
        cand_us = _time(new, inputs, flush)
        nbytes = _nbytes(inputs) + _nbytes(list(model.state_dict().values())) + _nbytes(model(*inputs))
    rate = max(big_rate, copy_rate(nbytes, flush))
    sol_us = nbytes / rate
    return {"eager_us": eager_us, "compile_us": compile_us, "cand_us": cand_us,
            "vs_eager": eager_us / cand_us, "vs_compile": compile_us / cand_us, "sol_us": sol_us,
            "cand_sol": sol_us / cand_us, "compile_sol": sol_us / compile_us, "mbytes": nbytes / 1e6}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=Path)
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--prepare-one", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    _prepare()
    if args.prepare_one:
        try:
            print(json.dumps(verify(*map(Path, args.prepare_one))))
        except Exception as exc:  # noqa: BLE001  the parent reads the reason
            print(json.dumps({"ok": False, "why": f"{type(exc).__name__}: {str(exc)[-300:]}"}))
        return 0
    import torch

    pairs = [tuple(line.split()) for line in args.pairs.read_text().splitlines() if line.strip()]
    t0 = time.time()
    with ThreadPoolExecutor(args.jobs) as pool:
        checked = list(pool.map(prepare, pairs))
    print(f"built and verified {sum(c['ok'] for c in checked)} of {len(pairs)} in {time.time() - t0:.0f} s",
          flush=True)
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    big = copy_rate(1 << 30, flush)
    print(f"{torch.cuda.get_device_name(0)}: copy {big / 1e6:.2f} TB/s at 1 GiB", flush=True)
    rows = []
    for (problem, candidate), check in zip(pairs, checked, strict=True):
        name = Path(candidate).stem
        rows.append({"name": name, **check})
        if check["ok"]:
            try:
                rows[-1].update(measure(Path(problem), Path(candidate), flush, big))
            except Exception as exc:  # noqa: BLE001  one pair's failure is a row, not the end of the run
                rows[-1].update({"ok": False, "why": f"timing: {type(exc).__name__}: {str(exc)[:300]}"})
        r = rows[-1]
        print(json.dumps(r), flush=True)
        torch.cuda.empty_cache()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(f"\n{'problem':44} {'eager us':>10} {'compile':>10} {'kernel':>10} {'vs eager':>8} {'vs comp':>8} "
          f"{'SOL%':>5} {'cmpSOL%':>7}")
    for r in rows:
        if not r["ok"]:
            print(f"{r['name'][:44]:44} FAILED {r['why'][:120]}")
            continue
        print(f"{r['name'][:44]:44} {r['eager_us']:10.1f} {r['compile_us']:10.1f} {r['cand_us']:10.1f} "
              f"{r['vs_eager']:8.2f} {r['vs_compile']:8.2f} {100 * r['cand_sol']:5.0f} {100 * r['compile_sol']:7.0f}")
    good = [r for r in rows if r["ok"]]
    if good:
        geo = statistics.geometric_mean([r["vs_compile"] for r in good])
        print(f"verified {len(good)}/{len(rows)}; geomean vs compile {geo:.3f}; "
              f">=1.05x vs compile: {sum(r['vs_compile'] >= 1.05 for r in good)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
