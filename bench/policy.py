"""Run kcoder's built-in policy over a problem set and print what it achieves.

    python bench/policy.py --device cpu                          # the examples and bench/problems
    python bench/policy.py --device cuda ~/KernelBench/KernelBench/level1 --allow gemm,conv

Problems: files or folders (every *.py in a folder; an examples/<name>/ folder means its
model.py) given on the command line, plus the examples and bench/problems/ (pointwise chains of
transcendental ops at 2048 x 4096: mish + bias + clamp, ...) unless --no-examples. Each problem is a
full `kcoder optimize` run without a model (capture, templates, verify, tune --trials N,
timing, plain-build check) in a scratch run directory. Prints per problem the outcome and
speed-ups, then coverage (share with a verified candidate), the share at least 1.05x faster
than eager and than torch.compile, geomean speed-ups over the verified ones, and failures by
family (unsupported op, capture, build/verify).

    python bench/policy.py --device cuda --emit DIR ~/KernelBench/KernelBench/level1

--emit DIR only captures and renders: it writes each covered problem's candidate as DIR/<name>.py
(the naming `kcoder suite --solutions DIR` matches) and DIR/footprints.json (each one's MB of
inputs, parameters and outputs), and prints the coverage and the unsupported ops, without
building or timing anything (no GPU needed to render CUDA candidates); --jobs N captures N at once.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kcoder.agent.optimize import optimize  # noqa: E402
from kcoder.settings import Settings, parse_allow  # noqa: E402
from kcoder.ui import Output  # noqa: E402


def problems(paths: list[str], examples: bool) -> list[Path]:
    found: list[Path] = []
    for p in map(Path, paths):
        found += sorted(q for q in p.glob("*.py") if not q.name.startswith("_")) if p.is_dir() else [p]
    if examples:
        found += sorted((ROOT / "examples").glob("*/model.py")) + sorted((ROOT / "bench" / "problems").glob("*.py"))
    return list(dict.fromkeys(p.resolve() for p in found))  # a folder named twice runs once


def run_one(problem: Path, settings: Settings) -> dict:
    from rich.console import Console

    out = Output(Console(file=io.StringIO(), width=120))
    code = optimize(problem, settings, out)
    runs = sorted(settings.runs_dir.glob("*/report.json"), key=lambda p: p.stat().st_mtime)
    report = json.loads(runs[-1].read_text()) if runs else {}
    return {"code": code, "report": report}


def problem_name(problem: Path) -> str:
    """An examples-style problem (<name>/model.py) is named by its folder, as kcoder suite names it."""
    return problem.parent.name if problem.name == "model.py" else problem.stem


def family(report: dict) -> str:
    policy = report.get("policy") or {}
    if policy.get("unsupported"):
        return "unsupported: " + ", ".join(sorted(policy["unsupported"]))
    if not policy.get("kernels"):
        return "capture: " + (policy.get("error") or report.get("message", ""))[:80]
    return "verify/build"


DTYPE_BYTES = {"float64": 8, "int64": 8, "complex64": 8, "float32": 4, "int32": 4, "float16": 2, "bfloat16": 2,
               "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


def footprint_mb(graph: dict) -> float:
    """MB of the captured graph's inputs, parameters and outputs (shapes as the capture saw them)."""
    nodes = {n["name"]: n for n in graph.get("nodes", [])}

    def mb(node: dict | None) -> float:
        if not node or node.get("shape") is None:
            return 0.0
        size = DTYPE_BYTES.get(str(node.get("dtype", "")).removeprefix("torch."), 4)
        return math.prod(node["shape"]) * size / 1e6

    outputs = [o.get("ref") for o in graph.get("outputs", []) if isinstance(o, dict)]
    return round(sum(mb(n) for n in nodes.values() if n["op"] == "placeholder")
                 + sum(mb(nodes.get(ref)) for ref in outputs), 1)


def emit(todo: list[Path], settings: Settings, out_dir: Path, jobs: int = 1) -> None:
    """Render the policy's candidate for every problem into out_dir (no build, no timing), `jobs`
    captures at a time (each is a child process); DIR/footprints.json: each rendered problem's
    MB of inputs, parameters and outputs (device_session.sh's kbsuite takes small ones first)."""
    from concurrent.futures import ThreadPoolExecutor

    from kcoder.policy.driver import generate

    out_dir.mkdir(parents=True, exist_ok=True)
    covered, ops, errors = 0, Counter(), Counter()
    fp_path = out_dir / "footprints.json"  # kept: candidates rendered there before (kbsuite's KB_SOL)
    footprints = json.loads(fp_path.read_text()) if fp_path.is_file() else {}

    def report(problem: Path, g, mb: float | None) -> None:
        nonlocal covered
        name = problem_name(problem)
        if g.source is not None and not g.kernels:  # only library calls: nothing of the policy's to judge
            errors["library calls only"] += 1
            print(f"{name:50} none      library calls only (no kernel of its own)", flush=True)
        elif g.source is not None:
            covered += 1
            (out_dir / f"{name}.py").write_text(g.source)
            footprints[name] = mb
            print(f"{name:50} rendered  {len(g.kernels)} kernel(s), {mb} MB", flush=True)
        else:
            ops.update(g.unsupported)
            errors["unsupported" if g.unsupported else "capture/plan"] += 1
            why = ", ".join(f"{op} x{n}" for op, n in g.unsupported.items()) or g.error.splitlines()[-1][-100:]
            print(f"{name:50} none      {why}", flush=True)

    with tempfile.TemporaryDirectory(prefix="kcoder-bench-emit-") as tmp:
        def render(item: tuple[int, Path]):
            work = Path(tmp) / f"{item[0]:03d}"
            g = generate(item[1], settings, work)
            graph = work / "graph.json"
            return g, footprint_mb(json.loads(graph.read_text())) if graph.is_file() else None

        killed = []
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            for i, (g, mb) in enumerate(pool.map(render, enumerate(todo))):
                if jobs > 1 and g.source is None and "exit code -9" in g.error:
                    killed.append(i)  # out of memory with others' get_inputs() beside it: alone, below
                else:
                    report(todo[i], g, mb)
        for i in killed:
            report(todo[i], *render((i, todo[i])))
    fp_path.write_text(json.dumps(footprints, indent=1) + "\n")
    n = len(todo)
    print(f"\n{n} problems for {settings.device}: {covered} rendered ({100 * covered / max(n, 1):.0f}%); "
          + (", ".join(f"{k} {v}" for k, v in errors.most_common()) or "no failures"))
    print("unsupported ops (problems): " + ", ".join(f"{op} {c}" for op, c in ops.most_common(15)))


def geomean(xs: list[float]) -> float | None:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--allow", default="gemm,conv")
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--budget", type=float, default=1.0)
    parser.add_argument("--no-examples", action="store_true")
    parser.add_argument("--limit", type=int, default=0, help="at most this many problems")
    parser.add_argument("--emit", type=Path, help="only render candidates into this folder (no builds)")
    parser.add_argument("--jobs", type=int, default=1, help="--emit: captures at a time")
    args = parser.parse_args()
    todo = problems(args.paths, not args.no_examples)[: args.limit or None]
    if args.emit:
        return emit(todo, Settings(device=args.device, allow=parse_allow(args.allow)), args.emit, args.jobs)
    rows, eager, compiled, failures = [], [], [], Counter()
    with tempfile.TemporaryDirectory(prefix="kcoder-bench-policy-") as tmp:
        for i, problem in enumerate(todo):
            name = problem_name(problem)
            settings = Settings(device=args.device, allow=parse_allow(args.allow), tune_trials=args.trials,
                                budget=args.budget, runs_dir=Path(tmp) / f"{i:03d}",
                                keep_going=True)  # measure the policy even where the preflight sees no headroom
            result = run_one(problem, settings)
            best = (result["report"] or {}).get("best")
            own_kernels = ((result["report"] or {}).get("policy") or {}).get("kernels")
            verified = bool(best and best.get("correct") and result["code"] == 0)
            if verified and not own_kernels:
                failures["library calls only"] += 1  # verified, but nothing of the policy's own to judge
                line = f"{name:40} none      library calls only (no kernel of its own)"
            elif verified:
                se, sc = best.get("speedup_vs_eager"), best.get("speedup_vs_compile")
                eager += [se] if se else []
                compiled += [sc] if sc else []
                line = f"{name:40} verified  {se or 0:6.2f}x eager  {sc or 0:6.2f}x compile"
            else:
                fam = family(result["report"])
                failures[fam.split(":")[0]] += 1
                line = f"{name:40} FAILED    {fam}"
            rows.append(line)
            print(line, flush=True)
    n = len(todo)
    print(f"\n{n} problems on {args.device}: coverage {len(eager)}/{n} verified"
          f" ({100 * len(eager) / max(n, 1):.0f}%)")
    print(f"faster than eager (>= 1.05x): {sum(s >= 1.05 for s in eager)}/{n}; "
          f"faster than torch.compile (>= 1.05x): {sum(s >= 1.05 for s in compiled)}/{n}")
    ge, gc = geomean(eager), geomean(compiled)
    print(f"geomean over verified: {ge or 0:.2f}x vs eager, {gc or 0:.2f}x vs torch.compile")
    print("failures by family: " + (", ".join(f"{k} {v}" for k, v in failures.most_common()) or "none"))


if __name__ == "__main__":
    main()
