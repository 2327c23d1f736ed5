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
from concurrent.futures import ThreadPoolExecutor
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
    jobs: int = 1  # checks side by side (each a child process)

    def validate(self) -> None:
        if self.n < 1:
            raise ValueError("--n must be at least 1")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"--device must be cpu or cuda, not {self.device!r}")
        from kcoder.settings import default_device

        if self.device == "cuda" and default_device() != "cuda":  # else every check would fail, one by one
            raise ValueError("--device cuda: this machine has no NVIDIA GPU (use --device cpu)")
        if self.jobs < 1:
            raise ValueError("--jobs must be at least 1")
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
    """Write opts.n checked problems and the manifest into opts.out; returns the manifest.
    With opts.jobs > 1 the checks of consecutive compositions run side by side, and results
    are taken in composition order, so the problems kept are the same as with one job."""
    opts.validate()
    ops = load_ops(opts.ops)
    known = kernelbench_sequences(opts.kernelbench) if opts.kernelbench else {}
    opts.out.mkdir(parents=True, exist_ok=True)
    _remove_previous(opts.out)
    tasks: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    seen: set[str] = set()
    attempt = 0
    with ThreadPoolExecutor(max_workers=opts.jobs) as pool:
        while len(tasks) < opts.n and attempt < ATTEMPTS_PER_TASK * opts.n:
            batch = [_draw(opts, ops, a) for a in range(attempt, attempt + opts.jobs)]
            static = [screen(comp, known, seen) for comp in batch]  # in order: which duplicate is first
            checked = list(pool.map(lambda cr: {} if cr[1] else check_in_child(render(cr[0], "synthesized"), opts),
                                    zip(batch, static, strict=True)))
            for comp, why, result in zip(batch, static, checked, strict=True):
                reason = why or ("" if result.get("ok") else result.get("reason") or "the check failed")
                if len(tasks) == opts.n:
                    break  # checked ahead by another job: not part of this run
                name = f"{len(tasks) + 1:04d}_" + "_".join(s.op.title().replace("_", "") for s in comp.steps)
                entry = {**describe(comp, attempt, opts.device),
                         **{k: v for k, v in result.items() if k not in ("ok", "reason")}}
                attempt += 1
                if reason:
                    rejected.append({**entry, "reason": reason})
                    continue
                (opts.out / f"{name}.py").write_text(render(comp, name))
                tasks.append({"name": name, "file": f"{name}.py", **entry})
                if on_task:
                    on_task(tasks[-1])
    manifest = {"seed": opts.seed, "device": opts.device, "min_ms": opts.min_ms, "max_ms": opts.max_ms,
                "ops_file": str(opts.ops) if opts.ops else None, "catalogue": sorted(ops), "jobs": opts.jobs,
                "kernelbench": str(opts.kernelbench) if opts.kernelbench else None, "attempts": attempt,
                "tasks": tasks, "rejected": rejected}
    (opts.out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _draw(opts: SynthOptions, ops: dict[str, Op], attempt: int) -> Composition:
    """Composition `attempt` of the seed: its own generator, its batch from the estimate."""
    comp = draw(random.Random(f"{opts.seed}:{attempt}"), ops)
    comp.batch = choose_batch(comp, opts.device, opts.min_ms, opts.max_ms)
    return comp


def describe(comp: Composition, attempt: int, device: str) -> dict[str, Any]:
    return {"attempt": attempt, "ops": comp.ops, "families": [CATALOGUE[o].family if o in CATALOGUE else "pointwise"
                                                                for o in comp.ops],
            "batch": comp.batch, "estimate_ms": round(1e3 * estimate_s(comp, device, comp.batch), 3)}


def screen(comp: Composition, known: dict[tuple[str, ...], str], seen: set[str]) -> str:
    """Why `comp` is dropped before any check runs ("" when it goes on to the checks): drawn
    before, or an op sequence KernelBench has."""
    source = render(comp, "synthesized")
    if source in seen:
        return "the same problem was drawn before"
    seen.add(source)
    sequence = tuple(op_sequence(source) or [])
    return f"KernelBench has this op sequence: {known[sequence]}" if sequence in known else ""


def check_in_child(source: str, opts: SynthOptions) -> dict[str, Any]:
    """Run synth_check on `source` in a fresh process (its own group, a time limit) with the
    candidate's scrubbed environment: the problem's code (an ops file's expressions included)
    sees no credentials, and a private HOME and TMPDIR."""
    from kcoder.evaluate.sandbox import Box, kill_all, scrubbed_env
    from kcoder.procs import run

    with tempfile.TemporaryDirectory(prefix="kcoder-synth-") as tmp:
        folder = Path(tmp)
        box = Box.create(folder)
        (folder / "problem.py").write_text(source)
        spec = {"path": str(folder / "problem.py"), "device": opts.device, "seed": opts.seed,
                "min_ms": opts.min_ms, "max_ms": opts.max_ms}
        (folder / "spec.json").write_text(json.dumps(spec))
        try:
            proc = run([sys.executable, "-m", "kcoder.env.synth_check", str(folder / "spec.json"),
                        str(folder / "result.json")], CHECK_TIMEOUT_S, cwd=folder, env=scrubbed_env(box))
        finally:
            kill_all(box.marker)
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
