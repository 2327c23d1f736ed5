"""What a plan is made of: kernels (a domain, reduced dims, operands, statements, reduction
stages or one scan, stores) and the forward steps that call them. Built by plan.py, rendered by
emit_cpu.py / emit_cuda.py."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Operand:
    """A tensor the kernel reads (or writes: `output`), as a Python expression of its view."""

    expr: str
    ctype: str
    row: bool  # read once per outer index (constant over D)
    expect: int  # inner stride the fast path assumes (0: broadcast along the last dim)
    output: bool = False


@dataclass
class Stmt:
    var: str
    ctype: str
    expr: str
    row: bool
    level: int  # row values: the stage after which it can be computed (-1: at the row start)


@dataclass
class Stage:
    kind: str  # sum, prod, max, min, argmax, argmin
    value: str  # the full-context value reduced
    result: str  # the row value it defines
    ctype: str


@dataclass
class Scan:
    """A running sum/product along the kernel's single dim: `result` is a full-context value
    (its prefix at each position), read by the stores and the statements after it."""

    kind: str  # sum, prod
    value: str  # the full-context value scanned
    result: str
    ctype: str
    reverse: bool = False  # from the row's end (flip, cumsum, flip)
    exclusive: bool = False  # the prefix before the position (cat(zero, cumsum(x[:-1])))

    @property
    def identity(self) -> str:
        return "1.0" if self.kind == "prod" else "0.0"


@dataclass
class Kernel:
    name: str
    domain: tuple[int, ...]
    dims: tuple[int, ...]
    operands: list[Operand] = field(default_factory=list)
    stmts: list[Stmt] = field(default_factory=list)
    stages: list[Stage] = field(default_factory=list)
    stores: list[tuple[int, str]] = field(default_factory=list)  # (operand index, value)
    scan: Scan | None = None  # a scan kernel: dims is the scanned dim, there are no stages

    @property
    def perm(self) -> list[int]:
        return [d for d in range(len(self.domain)) if d not in self.dims] + list(self.dims)

    def describe(self) -> str:
        if not self.dims:
            return f"pointwise over {list(self.domain)}"
        if self.scan:
            how = "".join(f"{w} " for w, on in (("reverse", self.scan.reverse), ("exclusive", self.scan.exclusive))
                          if on)
            return f"{how}scan (cum{self.scan.kind}) along dim {self.dims[0]} of {list(self.domain)}"
        kinds = "+".join(s.kind for s in self.stages)
        return f"row reduction ({kinds}) over dims {list(self.dims)} of {list(self.domain)}"


@dataclass
class Plan:
    kernels: list[Kernel]
    lines: list[str]  # forward's body
    returns: list[str]
    needs: set[str]  # "gemm"/"conv" library calls used
