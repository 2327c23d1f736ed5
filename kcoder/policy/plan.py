"""Partition a Graph into kernels and the forward's Python steps (allocation and views only).

A kernel iterates over a domain X (a shape) split into outer dims and reduced dims D (none for
a pointwise kernel; one for a scan kernel). Values inside it live in one of two contexts: "full" (one per element of
X) or "row" (one per outer index: results of reductions over D, and what is computed from
them). Pointwise ops are inlined into whichever kernel needs them (recomputing is cheaper
than a round trip to memory); a value is materialized (written by a kernel of its own) only
where it must be: graph outputs, inputs of library calls and of views that are not neutral,
and reductions that do not fit the consuming kernel's domain. Every tensor a kernel reads is
passed as a view expanded to X and permuted so that D comes last: the kernel indexes it with
strides, so broadcasting and non-contiguous inputs need no copy.

A scan (cumsum/cumprod) is the root of a kernel over its input's shape with the scanned dim as
D: the pointwise DAG it scans is inlined before it (a masked cumsum is one kernel) and the
pointwise ops over its result of the same shape after it (the epilogue). Such a kernel holds
one scan and no reduction stages: a reduction it would need is materialized first.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kcoder.policy import ops
from kcoder.policy.batchdims import shape_py
from kcoder.policy.graph import DTYPES, Graph, Node, Ref
from kcoder.policy.kernel import Kernel, Operand, Plan, Scan, Stage, Stmt


class Unsupported(Exception):
    """The module needs ops the policy cannot lower; `census` counts them by ATen name."""

    def __init__(self, census: Counter[str], detail: str = "") -> None:
        self.census = census
        listed = ", ".join(f"{op} x{n}" for op, n in census.most_common())
        super().__init__(f"unsupported: {listed}" + (f" ({detail})" if detail else ""))


class _NeedMaterialized(Exception):
    def __init__(self, name: str) -> None:
        self.name = name


def _pad(shape: tuple[int, ...], rank: int) -> tuple[int, ...]:
    return (1,) * (rank - len(shape)) + tuple(shape)


def _fits(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """`shape` broadcasts (right-aligned) to `target`."""
    return len(shape) <= len(target) and all(s in (1, t) for s, t in zip(_pad(shape, len(target)), target, strict=True))


def _strip(shape: tuple[int, ...]) -> tuple[int, ...]:
    i = 0
    while i < len(shape) and shape[i] == 1:
        i += 1
    return tuple(shape[i:])


def _shape_py(shape: tuple[int, ...]) -> str:
    return shape_py(tuple(shape))  # a dim that follows the batch as its expression (batchdims.py)


class Planner:
    """Builds the Plan; `allow` names the library calls the user allows (gemm, conv)."""

    def __init__(self, graph: Graph, allow: list[str]) -> None:
        self.g, self.allow = graph, set(allow)
        self.py: dict[str, str] = {}
        self.lines: list[str] = []
        self.kernels: list[Kernel] = []
        self.needs: set[str] = set()

    def plan(self) -> Plan:
        census = self.g.census()
        if census:
            raise Unsupported(census)
        returns = []
        for out in self.g.outputs:
            if not isinstance(out, Ref):
                raise Unsupported(Counter({f"constant output {out!r}": 1}))
            node = self.g.nodes[out.name]
            if node.kind in ("source", "view"):  # would alias an input: copy it in a kernel
                copy = Node(f"{node.name}__copy", "pw", "cast", [out], node.shape, node.dtype, {}, "copy")
                self.g.nodes[copy.name] = copy
                node = copy
            returns.append(self.materialize(node.name))
        return Plan(self.kernels, self.lines, returns, self.needs)

    # --- materialized tensors (Python variables of forward) ------------------------------
    def materialize(self, name: str) -> str:
        if name in self.py:
            return self.py[name]
        node = self.g.nodes[name]
        if node.kind == "source":
            key = node.attrs["key"]
            if node.op == "constant_buffer":
                raise Unsupported(Counter({"non-persistent buffer": 1}), f"buffer {key} is not in the state dict")
            getter = {"param": "get_parameter", "buffer": "get_buffer"}.get(node.op)
            self.py[name] = f"self.{getter}({key!r})" if getter else f"inputs[{key}]"
        elif node.kind == "view":
            self._assign(name, self.materialize(node.args[0].name) + _view_suffix(node, self.g))
        elif node.kind == "lib":
            self._library(node)
        elif node.kind in ("pw", "reduce", "scan"):
            while True:  # a value a kernel cannot inline is materialized first, then it retries
                try:
                    self._kernel(node)
                    break
                except _NeedMaterialized as need:
                    if need.name == name:
                        raise Unsupported(Counter({node.aten: 1}), "no kernel shape fits it") from None
                    self.materialize(need.name)
        else:
            raise Unsupported(Counter({node.aten: 1}))
        return self.py[name]

    def _assign(self, name: str, expr: str) -> None:
        self.lines.append(f"t_{name} = {expr}")
        self.py[name] = f"t_{name}"

    def _library(self, node: Node) -> None:
        need = node.attrs["needs"]
        if need not in self.allow:
            raise Unsupported(Counter({node.aten: 1}), f"library {need} needs --allow {need}")
        self.needs.add(need)
        args = [self.materialize(a.name) if isinstance(a, Ref) else a for a in node.args]
        if node.op in ("mm", "bmm"):
            self._assign(node.name, f"torch.{node.op}({args[0]}, {args[1]})")
            return
        if node.op in ("addmm", "_addmm_activation"):  # bias (+ ReLU) as the GEMM's epilogue (rewrite.py)
            self._assign(node.name, f"torch.{node.op}({args[0]}, {args[1]}, {args[2]})")
            return
        x, w, b, stride, padding, dilation, transposed, out_pad, groups = args[:9]
        nd = len(node.shape) - 2
        if transposed:
            call = (f"torch.nn.functional.conv_transpose{nd}d({x}, {w}, {b}, {tuple(stride)}, {tuple(padding)}, "
                    f"{tuple(out_pad)}, {groups}, {tuple(dilation)})")
        else:
            call = (f"torch.nn.functional.conv{nd}d({x}, {w}, {b}, {tuple(stride)}, {tuple(padding)}, "
                    f"{tuple(dilation)}, {groups})")
        self._assign(node.name, call)

    def _kernel(self, root: Node) -> None:
        builder = KernelBuilder(self, root, f"k{len(self.kernels)}")
        kernel, alloc = builder.build()
        self.kernels.append(kernel)
        self.lines.append(alloc)
        self.lines.append(f"_ext.{kernel.name}([{', '.join(o.expr for o in kernel.operands)}])")
        self.py[root.name] = f"t_{root.name}"


def _view_suffix(node: Node, g: Graph) -> str:
    """The Python view of a view node (allowed in forward: no compute)."""
    a, op = node.args, node.op
    if op in ("view", "_unsafe_view", "reshape"):
        return f".reshape{_shape_py(node.shape)}"
    if op == "unsqueeze":
        return f".unsqueeze({a[1]})"
    if op == "squeeze":
        return f".reshape{_shape_py(node.shape)}"
    if op == "permute":
        return f".permute({', '.join(map(str, a[1]))})"
    if op == "t":
        return ".t()"
    if op == "transpose":
        return f".transpose({a[1]}, {a[2]})"
    if op in ("expand", "broadcast_in_dim"):
        if op == "broadcast_in_dim":
            keep = a[2]
            inner = tuple(node.shape[d] if d in keep else 1 for d in range(len(node.shape)))
            inner = tuple(s if d not in keep else g.nodes[a[0].name].shape[keep.index(d)]
                          for d, s in enumerate(inner))
            return f".reshape{_shape_py(inner)}.expand{_shape_py(node.shape)}"
        return f".expand{_shape_py(node.shape)}"
    if op == "slice":
        dim, start, end, step = (a + [0, None, None, 1])[1:5]
        index = "".join("slice(None), " for _ in range(dim % len(node.shape)))
        return f"[({index}slice({start}, {end}, {step or 1}),)]"
    if op == "select":
        return f".select({a[1]}, {a[2]})"
    if op == "unfold":  # a pooling window view (graph.py)
        return f".unfold({a[1]}, {a[2]}, {a[3]})"
    return ""  # alias, detach, lift_fresh: the same tensor


class KernelBuilder:
    """One kernel for `root`: its domain, the values it inlines, its loads and stores."""

    def __init__(self, planner: Planner, root: Node, name: str) -> None:
        self.p, self.g, self.root = planner, planner.g, root
        self.scan_node: Node | None = None  # the scan of a scan kernel (set by _domain)
        domain, dims, self.root_ctx = self._domain(root)
        self.k = Kernel(name, domain, dims)
        self.memo: dict[tuple[str, str], tuple[str, int]] = {}
        self.loads: dict[tuple[str, str], int] = {}
        self.used: set[str] = set()
        self.stage_of: dict[str, tuple[str, int]] = {}

    # --- domain --------------------------------------------------------------------------
    def _domain(self, root: Node) -> tuple[tuple[int, ...], tuple[int, ...], str]:
        scan = root if root.kind == "scan" else next(
            (n for n in self._reductions_below(root, "scan") if n.shape == root.shape), None)
        if scan is not None and (root.kind == "scan" or not self._reductions_below(root)):
            self.scan_node = scan
            return scan.shape, (scan.attrs["dim"],), "full"
        if root.kind == "reduce":
            x = self.g.nodes[root.args[0].name].shape
            return x, tuple(root.attrs["dims"]), self._row_form(root.shape, x, root.attrs["dims"])
        for red in self._reductions_below(root):
            x, dims = self.g.nodes[red.args[0].name].shape, tuple(red.attrs["dims"])
            if root.shape == x:
                return x, dims, "full"
            form = self._row_form(root.shape, x, dims)
            if form and self._row_form(red.shape, x, dims):
                return x, dims, form
        return root.shape, (), "full"

    @staticmethod
    def _row_form(shape: tuple[int, ...], x: tuple[int, ...], dims: Any) -> str:
        kd = tuple(1 if i in dims else s for i, s in enumerate(x))
        sq = tuple(s for i, s in enumerate(x) if i not in dims)
        if _pad(shape, len(x)) == kd:
            return "kd"
        if len(shape) <= len(sq) and _pad(shape, len(sq)) == sq:
            return "sq"
        return ""

    def _reductions_below(self, root: Node, kind: str = "reduce") -> list[Node]:
        """The reductions (or scans) that the pointwise DAG of `root` reads, not yet materialized."""
        found, stack, seen = [], [root.name], set()
        while stack:
            node = self.g.nodes[stack.pop()]
            if node.name in seen or node.name in self.p.py:
                continue
            seen.add(node.name)
            if node.kind == kind:
                found.append(node)
            elif node.kind in ("pw", "view"):
                stack.extend(node.refs())
        return found

    # --- values --------------------------------------------------------------------------
    def build(self) -> tuple[Kernel, str]:
        root, k = self.root, self.k
        value, _ = self.ref(root.name, self.root_ctx)
        out_shape = root.shape
        alloc = (f"t_{root.name} = torch.empty({_shape_py(out_shape)}, dtype={root.dtype}, device=_dev)")
        idx = self._operand(f"t_{root.name}", out_shape, root.dtype, self.root_ctx, output=True)
        k.stores.append((idx, value))
        return k, alloc

    def ctx_shape(self, ctx: str) -> tuple[int, ...]:
        x, dims = self.k.domain, self.k.dims
        if ctx == "kd":
            return tuple(1 if i in dims else s for i, s in enumerate(x))
        if ctx == "sq":
            return tuple(s for i, s in enumerate(x) if i not in dims)
        return x

    def ref(self, name: str, ctx: str) -> tuple[str, int]:
        """The C++ variable holding value `name` in context ctx (full, kd or sq), and its level."""
        key = (name, ctx)
        if key in self.memo:
            return self.memo[key]
        node = self.g.nodes[name]
        if name in self.p.py or node.kind == "source":
            result = self._load(name, ctx)
        elif node.kind == "view" and self._neutral(node, ctx) is not None:
            result = self.ref(node.args[0].name, self._neutral(node, ctx))  # type: ignore[arg-type]
        elif node.kind == "pw" and _fits(node.shape, self.ctx_shape(ctx)):
            result = self._pointwise(node, ctx)
        elif node.kind == "reduce" and self._reduction_fits(node, ctx):
            result = self._stage(node)
        elif node.kind == "scan" and node is self.scan_node and ctx == "full":
            result = self._scan(node)
        else:
            raise _NeedMaterialized(name)
        self.memo[key] = result
        return result

    def _neutral(self, node: Node, ctx: str) -> str | None:
        """The context to read the view's input in, if the view costs nothing here, else None."""
        inner = self.g.nodes[node.args[0].name]
        if node.op in ("alias", "detach", "lift_fresh"):
            return ctx
        if node.op == "expand" and _fits(inner.shape, node.shape) and _fits(node.shape, self.ctx_shape(ctx)):
            return ctx
        if node.op not in ("view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "broadcast_in_dim"):
            return None
        if _strip(node.shape) == _strip(inner.shape):  # only leading 1s added or removed
            return ctx
        x, dims = self.k.domain, self.k.dims
        outer_form, inner_form = self._row_form(node.shape, x, dims), self._row_form(inner.shape, x, dims)
        if dims and inner_form and (outer_form if ctx != "full" else outer_form == "kd"):
            return inner_form  # the same per-row value with or without the reduced dims
        return None

    def _reduction_fits(self, node: Node, ctx: str) -> bool:
        x, dims = self.k.domain, self.k.dims
        if not dims or self.scan_node or self.g.nodes[node.args[0].name].shape != x or \
                tuple(node.attrs["dims"]) != dims:
            return False
        form = self._row_form(node.shape, x, dims)
        return form == "kd" if ctx in ("full", "kd") else form == "sq"

    def _new_var(self, name: str, ctype: str, expr: str, row: bool, level: int) -> tuple[str, int]:
        var, n = f"v_{name}", 1
        while var in self.used:
            n += 1
            var = f"v_{name}_{n}"
        self.used.add(var)
        self.k.stmts.append(Stmt(var, ctype, expr, row, level))
        return var, level

    def _pointwise(self, node: Node, ctx: str) -> tuple[str, int]:
        if node.op == "iota" and (ctx != "full" or self.k.dims != (node.attrs["dim"],)):
            raise _NeedMaterialized(node.name)  # a position is only known in its own row loop
        args, level, row = [], -1, ctx != "full"
        for a in node.args:
            if isinstance(a, Ref):
                var, lv = self.ref(a.name, ctx)
                args.append(var)
                level = max(level, lv)
            else:
                args.append(a)
        expr = ops.render(node.op, args, node.attrs, DTYPES[node.dtype])
        return self._new_var(node.name, DTYPES[node.dtype], expr, row, level)

    def _stage(self, node: Node) -> tuple[str, int]:
        if node.name in self.stage_of:  # read in two contexts: one reduction
            return self.stage_of[node.name]
        value, _ = self.ref(node.args[0].name, "full")
        ctype = DTYPES[node.dtype]
        var = f"v_{node.name}"
        self.k.stages.append(Stage(node.op, value, var, ctype))
        self.stage_of[node.name] = (var, len(self.k.stages) - 1)
        self.used.add(var)
        return self.stage_of[node.name]

    def _scan(self, node: Node) -> tuple[str, int]:
        value, _ = self.ref(node.args[0].name, "full")
        var = f"v_{node.name}"
        self.k.scan = Scan(node.op, value, var, DTYPES[node.dtype], node.attrs["reverse"], node.attrs["exclusive"])
        self.used.add(var)
        return var, -1

    # --- loads -----------------------------------------------------------------------------
    def _load(self, name: str, ctx: str) -> tuple[str, int]:
        node = self.g.nodes[name]
        expr = self.p.materialize(name)
        idx = self._operand(expr, node.shape, node.dtype, ctx)
        var, _ = self._new_var(f"{name}_in{idx}", DTYPES[node.dtype], f"LOAD{idx}", ctx != "full", -1)
        return var, -1

    def _operand(self, expr: str, shape: tuple[int, ...], dtype: str, ctx: str, output: bool = False) -> int:
        key = (expr, ctx if not output else "out")
        if key in self.loads:
            return self.loads[key]
        x, dims, perm = self.k.domain, self.k.dims, self.k.perm
        view = expr
        if ctx == "sq":  # per-row values without the reduced dims: put them back as size 1
            sq_rank = len(x) - len(dims)
            if len(shape) < sq_rank:
                view += "[" + ", ".join(["None"] * (sq_rank - len(shape))) + "]"
            for d in sorted(dims):
                view += f".unsqueeze({d})"
            rest = iter(_pad(shape, sq_rank))
            shape = tuple(1 if i in dims else next(rest) for i in range(len(x)))
        if tuple(_pad(shape, len(x))) != x or len(shape) != len(x):
            view += f".expand{_shape_py(x)}"
        if perm != list(range(len(x))):
            view += f".permute({', '.join(map(str, perm))})"
        padded = _pad(shape, len(x))
        last = perm[-1] if perm else 0
        expect = 0 if x and padded[last] == 1 and x[last] > 1 else 1
        self.k.operands.append(Operand(view, DTYPES[dtype], ctx != "full", expect, output))
        self.loads[key] = len(self.k.operands) - 1
        return self.loads[key]


def plan_graph(graph: Graph, allow: list[str]) -> Plan:
    """The kernels and forward steps for `graph`; Unsupported names what cannot be lowered."""
    return Planner(graph, allow).plan()

