"""`kcoder synth`: KernelBench-format problems composed from the op catalogue, each checked in
a child process (synth_check.py), with a manifest of what was kept and why the rest was not.

Composition k of a seed is drawn from its own generator (seed, k), so the problems written for
a seed are the same on every run on one device kind; a measurement only decides whether a
composition is kept (its eager time must be in range), and the batch sizes aim at the middle of
that range, far from its edges.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcoder.env.catalogue import CATALOGUE, Op, Step
from kcoder.env.compose import Composition, choose_batch, draw, estimate_s, render
from kcoder.env.kbseq import kernelbench_sequences, op_sequence

MANIFEST = "manifest.json"
CHECK_TIMEOUT_S = 300.0
ATTEMPTS_PER_TASK = 25


@dataclass
class SynthOptions:
    n: int = 20
    out: Path = Path("synth")
    device: str = "cpu"
    seed: int = 0
    ops: Path | None = None
    kernelbench: Path | None = None
    min_ms: float = 1.0
    max_ms: float = 100.0

    def validate(self) -> None:
        if self.n < 1:
            raise ValueError("--n must be at least 1")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"--device must be cpu or cuda, not {self.device!r}")
        if not 0 < self.min_ms < self.max_ms:
            raise ValueError("--min-ms and --max-ms must satisfy 0 < min < max")


def load_ops(path: Path | None) -> dict[str, Op]:
    """The catalogue, or the part of it a --ops FILE names: a JSON list of op names, or
    {"use": [names], "pointwise": {"name": "an expression in x"}} to add pointwise ops."""
    if path is None:
        return dict(CATALOGUE)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable JSON op list ({exc})") from None
    spec = {"use": data} if isinstance(data, list) else data
    if not isinstance(spec, dict) or not isinstance(spec.get("use", []), list):
        raise ValueError(f'{path}: expected a list of op names or {{"use": [...], "pointwise": {{...}}}}')
    names = spec.get("use") or list(CATALOGUE)
    unknown = [n for n in names if n not in CATALOGUE]
    if unknown:
        raise ValueError(f"{path}: unknown op(s) {', '.join(map(str, unknown))}; known: {', '.join(CATALOGUE)}")
    ops = {n: CATALOGUE[n] for n in names}
    for name, expr in (spec.get("pointwise") or {}).items():
        if not isinstance(expr, str) or "x" not in expr:
            raise ValueError(f"{path}: pointwise op {name!r} needs an expression in x, e.g. \"torch.sin(x)\"")
        ops[name] = _user_pointwise(name, expr)
    if not any(o.family == "pointwise" or (not o.head and o.family != "loss") for o in ops.values()):
        raise ValueError(f"{path}: the ops need at least one that is not a GEMM/conv head or a loss")
    return ops


def _user_pointwise(name: str, expr: str) -> Op:
    from math import prod

    def make(rng: random.Random, shape: tuple[int, ...], k: int) -> Step:
        return Step(name, f"x = {expr}", shape, elems=2 * prod(shape), flops=prod(shape))

    return Op(name, "pointwise", (1, 2, 4), make)


def synthesize(opts: SynthOptions, on_task: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Write opts.n checked problems and the manifest into opts.out; returns the manifest."""
    opts.validate()
    ops = load_ops(opts.ops)
    known = kernelbench_sequences(opts.kernelbench) if opts.kernelbench else {}
    opts.out.mkdir(parents=True, exist_ok=True)
    _remove_previous(opts.out)
    tasks: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    seen: set[str] = set()
    attempt = 0
    while len(tasks) < opts.n and attempt < ATTEMPTS_PER_TASK * opts.n:
        comp = draw(random.Random(f"{opts.seed}:{attempt}"), ops)
        comp.batch = choose_batch(comp, opts.device, opts.min_ms, opts.max_ms)
        name = f"{len(tasks) + 1:04d}_" + "_".join(s.op.title().replace("_", "") for s in comp.steps)
        entry = describe(comp, attempt, opts.device)
        reason, result = screen(comp, name, opts, known, seen)
        entry.update({k: v for k, v in result.items() if k != "ok" and k != "reason"})
        if reason:
            rejected.append({**entry, "reason": reason})
        else:
            (opts.out / f"{name}.py").write_text(render(comp, name))
            tasks.append({"name": name, "file": f"{name}.py", **entry})
            if on_task:
                on_task(tasks[-1])
        attempt += 1
    manifest = {"seed": opts.seed, "device": opts.device, "min_ms": opts.min_ms, "max_ms": opts.max_ms,
                "ops_file": str(opts.ops) if opts.ops else None, "catalogue": sorted(ops),
                "kernelbench": str(opts.kernelbench) if opts.kernelbench else None, "attempts": attempt,
                "tasks": tasks, "rejected": rejected}
    (opts.out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def describe(comp: Composition, attempt: int, device: str) -> dict[str, Any]:
    return {"attempt": attempt, "ops": comp.ops, "families": [CATALOGUE[o].family if o in CATALOGUE else "pointwise"
                                                                for o in comp.ops],
            "batch": comp.batch, "estimate_ms": round(1e3 * estimate_s(comp, device, comp.batch), 3)}


def screen(comp: Composition, name: str, opts: SynthOptions, known: dict[tuple[str, ...], str],
           seen: set[str]) -> tuple[str, dict[str, Any]]:
    """Why `comp` is dropped ("" when kept) and the checker's result."""
    source = render(comp, "x")
    if source in seen:
        return "the same problem was drawn before", {}
    seen.add(source)
    sequence = tuple(op_sequence(source) or [])
    if sequence in known:
        return f"KernelBench has this op sequence: {known[sequence]}", {}
    result = check_in_child(render(comp, name), opts)
    return ("" if result.get("ok") else result.get("reason") or "the check failed"), result


def check_in_child(source: str, opts: SynthOptions) -> dict[str, Any]:
    """Run synth_check on `source` in a fresh process (its own group, a time limit)."""
    from kcoder.procs import child_env, run

    with tempfile.TemporaryDirectory(prefix="kcoder-synth-") as tmp:
        folder = Path(tmp)
        (folder / "problem.py").write_text(source)
        spec = {"path": str(folder / "problem.py"), "device": opts.device, "seed": opts.seed,
                "min_ms": opts.min_ms, "max_ms": opts.max_ms}
        (folder / "spec.json").write_text(json.dumps(spec))
        proc = run([sys.executable, "-m", "kcoder.env.synth_check", str(folder / "spec.json"),
                    str(folder / "result.json")], CHECK_TIMEOUT_S, cwd=folder, env=child_env())
        if (folder / "result.json").exists():
            return json.loads((folder / "result.json").read_text())
        why = "timed out" if proc.timed_out else f"the check process died (exit {proc.rc})"
        return {"ok": False, "reason": f"{why}: {(proc.output.strip().splitlines() or [''])[-1][:200]}"}


def _remove_previous(out: Path) -> None:
    """Remove the problem files an earlier synth run listed in this folder's manifest."""
    manifest = out / MANIFEST
    if not manifest.is_file():
        return
    try:
        old = json.loads(manifest.read_text()).get("tasks", [])
    except ValueError:
        return
    for task in old:
        path = out / Path(str(task.get("file", ""))).name
        if path.suffix == ".py" and path.is_file():
            path.unlink()
