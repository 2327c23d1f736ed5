"""Speed where the user runs it (issue 48): `kcoder optimize --shapes x=1,257,4096` judges the
run's best verified kernel again at each batch size named, against eager and torch.compile at
that size, and the report gives a row per size.

Each size is a problem of its own: the user's file (never modified) copied into the run
directory with get_inputs() wrapped, so that the inputs carrying the batch (every tensor whose
leading dim is the named input's) get that many rows, drawn as the problem draws them
(consecutive calls of its own get_inputs(), cut). The judge evaluates the kernel on that file
as on any problem: nothing of the candidate's is trusted more, and its output is compared with
Model's at that size. torch.compile is compiled afresh at each size: its best there, which a
process that met several sizes (and recompiled with a dynamic dim) would not beat. "*" is the
problem's own size: the run's own verdict.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcoder.verdict import Verdict

MAX_SIZES = 8
_SPEC = re.compile(r"^([A-Za-z_]\w*|\d+)=(.+)$")

# Appended to a copy of the problem's file; {rows}, {position} and {name} are filled in.
SIZED = '''

# --- appended by kcoder (optimize --shapes): get_inputs() at batch size {rows} of {name} ---
def _kcoder_sized_inputs(_own=get_inputs):
    import torch as _torch

    first = list(_own())
    anchor = first[{position}] if {position} < len(first) else None
    if not isinstance(anchor, _torch.Tensor) or anchor.dim() == 0:
        raise ValueError("--shapes names {name} (input {position}), which get_inputs() does not give as a tensor "
                         "with a batch dim")
    batch = anchor.shape[0]
    carry = [i for i, x in enumerate(first) if isinstance(x, _torch.Tensor) and x.dim() > 0 and x.shape[0] == batch]
    draws = [first]
    while batch * len(draws) < {rows}:
        draws.append(list(_own()))
    return [_torch.cat([d[i] for d in draws])[:{rows}].clone() if i in carry else x for i, x in enumerate(first)]


get_inputs = _kcoder_sized_inputs
'''


@dataclass(frozen=True)
class SizeSpec:
    """`NAME=1,257,*`: the forward input whose leading dim is the batch, and the sizes (None: "*")."""

    name: str
    sizes: tuple[int | None, ...]

    @property
    def text(self) -> str:
        return f"{self.name}=" + ",".join("*" if s is None else str(s) for s in self.sizes)


def parse_sizes(spec: str) -> SizeSpec:
    """`x=1,257,4096` or `x=1,8,64,*` (or `0=...`: the input's position); ValueError naming the problem."""
    found = _SPEC.match(spec.strip())
    if not found:
        raise ValueError(f"--shapes {spec!r}: expected off, auto, strict or NAME=SIZES such as x=1,257,4096 "
                         "(NAME: Model.forward's input that carries the batch; * is the problem's own size)")
    sizes: list[int | None] = []
    for item in found.group(2).split(","):
        item = item.strip()
        if item == "*":
            sizes.append(None)
        elif item.isdigit() and int(item) > 0:
            sizes.append(int(item))
        else:
            raise ValueError(f"--shapes {spec!r}: {item!r} is not a batch size (a whole number > 0, or *)")
    if len(set(sizes)) != len(sizes) or len(sizes) > MAX_SIZES:
        raise ValueError(f"--shapes {spec!r}: give at most {MAX_SIZES} sizes, each once")
    return SizeSpec(found.group(1), tuple(sizes))


def forward_position(problem: Path, name: str) -> int:
    """The position among forward's inputs of `name` (a number is a position already), read from
    the file's text: the problem's code is not run in kcoder's own process."""
    if name.isdigit():
        return int(name)
    tree = ast.parse(problem.read_text(encoding="utf-8"), filename=str(problem))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    args = [a.arg for a in item.args.posonlyargs + item.args.args][1:]  # after self
                    if name in args:
                        return args.index(name)
                    raise ValueError(f"{problem}: --shapes names {name!r}, but Model.forward's inputs are "
                                     f"{', '.join(args) or 'not named'} (a position such as 0=1,8,64 works too)")
    raise ValueError(f"{problem}: no Model.forward found to read --shapes {name!r} from")


def sized_problem(problem: Path, spec: SizeSpec, rows: int, folder: Path) -> Path:
    """A copy of `problem` whose get_inputs() gives batch size `rows` (SIZED), in `folder`."""
    position = forward_position(problem, spec.name)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{problem.stem}_batch{rows}.py"
    path.write_text(problem.read_text(encoding="utf-8")
                    + SIZED.format(rows=rows, position=position, name=spec.name), encoding="utf-8")
    return path


def speed_at_sizes(problem: Path, candidate: Path, spec: SizeSpec, own: Verdict, options: Any,
                   evaluate: Callable[[Path, Path, Any], Verdict], folder: Path,
                   say: Callable[[str], None] = lambda _: None) -> list[dict[str, Any]]:
    """A row per size of `spec`: the judge's verdict on `candidate` there ("*": `own`, the run's)."""
    from dataclasses import replace

    rows = []
    for size in spec.sizes:
        if size is None:
            rows.append(_row("*", own))
            continue
        say(f"judging the best kernel at batch size {size} of {spec.name} (--shapes {spec.text})")
        path = sized_problem(problem, spec, size, folder)
        rows.append(_row(str(size), evaluate(path, candidate, replace(options, shapes="off"))))
    return rows


def _row(size: str, v: Verdict) -> dict[str, Any]:
    return {"batch": size, "status": v.status, "correct": v.correct, "reason": v.reason,
            "candidate_us": v.candidate_us, "eager_us": v.eager_us, "compile_us": v.compile_us,
            "speedup_vs_eager": v.speedup_vs_eager, "speedup_vs_compile": v.speedup_vs_compile}


def size_lines(rows: list[dict[str, Any]], name: str) -> list[str]:
    """One line per size for the summary and report.md."""
    out = []
    for r in rows:
        label = f"{name}={r['batch']}" + (" (the problem's own)" if r["batch"] == "*" else "")
        if r.get("candidate_us") is not None and r.get("correct"):
            out.append(f"{label}: {_x(r.get('speedup_vs_compile'))} vs torch.compile, {_x(r.get('speedup_vs_eager'))} "
                       f"vs eager ({r['candidate_us']:,.1f} us; compile {_us(r.get('compile_us'))})")
        else:
            out.append(f"{label}: {r['status']}: {r['reason'][:160]}")
    return out


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _us(value: float | None) -> str:
    return "not timed" if value is None else f"{value:,.1f} us"
