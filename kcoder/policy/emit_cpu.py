"""C++/OpenMP source for a Plan's kernels (the cpu target).

Each kernel is one function taking its operands as a list of tensors (inputs expanded to the
domain and permuted, outputs preallocated by forward). At run time the dims are coalesced
(size-1 dims dropped, adjacent dims merged where every operand allows it), so contiguous
operands become one flat loop. The element loop has two copies: a fast one, taken when the
innermost stride of each operand is what the plan expects (1, or 0 for a broadcast), written
with literal indices so that the compiler vectorizes it (`omp simd`); and a generic one with
computed offsets, for non-contiguous or oddly broadcast inputs. Tails need no special case:
the loops run to the exact length. A scan kernel runs each row sequentially (one loop
computing the scanned value, the running sum/product in double, and the outputs; no `omp
simd`: every step depends on the last), rows split over OpenMP. TUNE: OpenMP schedule chunk and
the block of elements one task handles.
"""

from __future__ import annotations

import re

from kcoder.policy.batchdims import BATCH_SETTER, BATCH_VAR
from kcoder.policy.cpu_math import CPU_MATH
from kcoder.policy.emit_common import closure, row_levels, substitute
from kcoder.policy.kernel import Kernel, Plan, Stmt

TUNE = {"CHUNK": [0, 1, 16], "BLOCK": [1024, 4096, 16384]}
CONFIG = {"CHUNK": 0, "BLOCK": 4096}
# 512-bit vectors where the CPU has them (GCC prefers 256 by default): 2-2.5x on the loops here.
# -fno-trapping-math: the op table's `c ? a : f(x)` only evaluates f(x) where c is false, and
# GCC will not compute a float expression for every lane (if-convert it) while an operation
# might raise a trap; -fno-math-errno: sqrtf is otherwise a sqrt instruction plus a libm call
# that sets errno for negative inputs. Nothing here reads the FP exception flags or errno, and
# values, NaN and signed zeros are unchanged (unlike -ffast-math). Without the first, softplus
# loops stay scalar; without the second, sqrt and rsqrt ones (tests/policy/test_cpu_math.py).
CFLAGS = ["-O3", "-march=native", "-mprefer-vector-width=512", "-fno-trapping-math", "-fno-math-errno",
          "-fopenmp"]
LDFLAGS = ["-fopenmp"]

GEOM = r"""
namespace kc {
constexpr int MAXD = 8;
struct Acc { double v; int64_t i; };

// Drop size-1 dims and merge neighbours whose strides chain for every operand.
static void squash(std::vector<int64_t>& sz, std::vector<std::vector<int64_t>>& st) {
  std::vector<int64_t> s2;
  std::vector<std::vector<int64_t>> t2(st.size());
  for (size_t d = 0; d < sz.size(); ++d) {
    if (sz[d] == 1) continue;
    bool merge = !s2.empty();
    for (size_t k = 0; merge && k < st.size(); ++k) merge = t2[k].back() == st[k][d] * sz[d];
    if (merge) {
      s2.back() *= sz[d];
      for (size_t k = 0; k < st.size(); ++k) t2[k].back() = st[k][d];
      continue;
    }
    s2.push_back(sz[d]);
    for (size_t k = 0; k < st.size(); ++k) t2[k].push_back(st[k][d]);
  }
  sz = s2; st = t2;
}

struct Geom {
  std::vector<int64_t> os, is;
  std::vector<std::vector<int64_t>> ost, ist;
  int64_t O = 1, L = 1;
  Geom(const std::vector<torch::Tensor>& t, int nred) : ost(t.size()), ist(t.size()) {
    const int nd = t[0].dim();
    for (size_t k = 0; k < t.size(); ++k) {
      TORCH_CHECK(t[k].sizes() == t[0].sizes(), "operand ", k, " has another shape");
      TORCH_CHECK(t[k].device() == t[0].device(), "operand ", k, " is on another device");
      for (int d = 0; d < nd; ++d) (d < nd - nred ? ost[k] : ist[k]).push_back(t[k].stride(d));
    }
    for (int d = 0; d < nd; ++d) (d < nd - nred ? os : is).push_back(t[0].size(d));
    squash(os, ost);
    squash(is, ist);
    if (nred == 0 && !os.empty()) {  // pointwise: the innermost dim is the vector loop
      is.push_back(os.back()); os.pop_back();
      for (size_t k = 0; k < t.size(); ++k) { ist[k].push_back(ost[k].back()); ost[k].pop_back(); }
    }
    for (auto s : os) O *= s;
    for (auto s : is) L *= s;
  }
  inline int64_t base(size_t k, int64_t o) const {
    int64_t off = 0;
    for (int d = (int)os.size() - 1; d >= 0; --d) { off += (o % os[d]) * ost[k][d]; o /= os[d]; }
    return off;
  }
  inline int64_t ioff(size_t k, int64_t r) const {
    if (is.size() == 1) return r * ist[k][0];
    int64_t off = 0;
    for (int d = (int)is.size() - 1; d >= 0; --d) { off += (r % is[d]) * ist[k][d]; r /= is[d]; }
    return off;
  }
  bool fast(const int* expect) const {
    if (is.size() > 1) return false;
    if (is.empty()) return true;
    for (size_t k = 0; k < ist.size(); ++k)
      if (expect[k] >= 0 && ist[k][0] != expect[k]) return false;
    return true;
  }
};

}  // namespace kc
"""

CPU_HELPERS = r"""
namespace kc {
template <class F, class C>
static Acc split(int par, int64_t L, F f, C combine) {
  if (par <= 1 || L < 8192) return f(0, L);
  std::vector<Acc> part(par);
  #pragma omp parallel for num_threads(par) schedule(static, 1)
  for (int i = 0; i < par; ++i) part[i] = f(L * i / par, L * (i + 1) / par);
  Acc a = part[0];
  for (int i = 1; i < par; ++i) a = combine(a, part[i]);
  return a;
}

template <class F>
static void each(int par, int64_t L, F f) {
  if (par <= 1 || L < 8192) { f(0, L); return; }
  #pragma omp parallel for num_threads(par) schedule(static, 1)
  for (int i = 0; i < par; ++i) f(L * i / par, L * (i + 1) / par);
}

static inline Acc c_sum(Acc a, Acc b) { return {a.v + b.v, 0}; }
static inline Acc c_prod(Acc a, Acc b) { return {a.v * b.v, 0}; }
static inline Acc c_max(Acc a, Acc b) { return (b.v > a.v || b.v != b.v) ? b : a; }
static inline Acc c_min(Acc a, Acc b) { return (b.v < a.v || b.v != b.v) ? b : a; }
static inline Acc c_argmax(Acc a, Acc b) { return (a.v == a.v && (b.v > a.v || b.v != b.v)) ? b : a; }
static inline Acc c_argmin(Acc a, Acc b) { return (a.v == a.v && (b.v < a.v || b.v != b.v)) ? b : a; }
}  // namespace kc
"""


PARALLEL_FOR = """#if CHUNK > 0
  #pragma omp parallel for schedule(dynamic, CHUNK)
#else
  #pragma omp parallel for schedule(static)
#endif
"""

# Per reduction kind: accumulator declaration, update (x = the value), result, simd clause.
_STAGE = {
    # sum: float partial sums over blocks of SUM_BLOCK (vectorized at full width), added in double
    "sum": ("double acc = 0;", "part += {x};", "kc::Acc{acc, 0}", "reduction(+:part)"),
    "prod": ("double acc = 1;", "acc *= (double)({x});", "kc::Acc{acc, 0}", "reduction(*:acc)"),
    # max/min: a NaN flag beside the plain max keeps both vectorizable and NaN-propagating
    "max": ("float acc = -INFINITY; int nan = 0;",
            "{{ const float x_ = {x}; acc = x_ > acc ? x_ : acc; nan |= x_ != x_; }}",
            "kc::Acc{nan ? NAN : acc, 0}", "reduction(max:acc) reduction(|:nan)"),
    "min": ("float acc = INFINITY; int nan = 0;",
            "{{ const float x_ = {x}; acc = x_ < acc ? x_ : acc; nan |= x_ != x_; }}",
            "kc::Acc{nan ? NAN : acc, 0}", "reduction(min:acc) reduction(|:nan)"),
    "argmax": ("float acc = -INFINITY; int64_t at = r0;",
               "{{ const float x_ = {x}; if (acc == acc && (x_ > acc || x_ != x_)) {{ acc = x_; at = r; }} }}",
               "kc::Acc{acc, at}", ""),
    "argmin": ("float acc = INFINITY; int64_t at = r0;",
               "{{ const float x_ = {x}; if (acc == acc && (x_ < acc || x_ != x_)) {{ acc = x_; at = r; }} }}",
               "kc::Acc{acc, at}", ""),
}


# The two copies of an element loop: literal unit/zero strides (vectorized), and computed
# offsets (Geom::ioff: a multiply for one inner dim, as for a transposed input; div/mod for
# several). A third, vectorized copy with run-time strides slowed the first one down when it
# was tried (before the restrict pointers were hoisted; not tried since).
PATHS = ("fast", "generic")
_ELEMENT = re.compile(r"ELEM(\d+)")


def _element_ref(kernel: Kernel, path: str, i: int) -> str:
    """Operand i's element r. The fast path reads through restrict pointers hoisted out of the
    loop (q_i = p_i + b_i): through the lambdas' captured pointers GCC reloads and checks them
    in every iteration, which made a whole-tensor sum 10x slower."""
    if kernel.operands[i].row:
        return f"p{i}[b{i}]"
    if path == "fast":
        return f"q{i}[r]" if kernel.operands[i].expect else f"q{i}[0]"
    return f"p{i}[b{i} + g.ioff({i}, r)]"


def _load_fn(kernel: Kernel, path: str):
    return lambda i: _element_ref(kernel, path, i)


def _full_store_lines(kernel: Kernel) -> list[str]:
    return [f"ELEM{idx} = {value};" for idx, value in kernel.stores if not kernel.operands[idx].row]


def _hoisted(kernel: Kernel, indent: str) -> list[str]:
    out = []
    for i, op in enumerate(kernel.operands):
        if not op.row:
            const = "" if op.output else "const "
            out.append(f"{indent}{const}{op.ctype}* __restrict__ q{i} = p{i} + b{i};")
    return out


def _loop(kernel: Kernel, targets: list[str], tail: list[str], pragma: str, indent: str) -> list[str]:
    out = []
    for path in PATHS:
        load = _load_fn(kernel, path)
        head = {"fast": "if (fast) {", "generic": "} else {"}[path]
        out.append(indent + head)
        if path == "fast":
            out += _hoisted(kernel, indent + "  ")
            out.append(f"{indent}  #pragma omp simd {pragma}".rstrip())
        out.append(f"{indent}  for (int64_t r = r0; r < r1; ++r) {{")
        for s in closure(kernel, targets):
            out.append(f"{indent}    const {s.ctype} {s.var} = {substitute(s.expr, load)};")
        for t in tail:
            line = _ELEMENT.sub(lambda m, path=path: _element_ref(kernel, path, int(m.group(1))), t)
            out.append(f"{indent}    {substitute(line, load)}")
        out.append(f"{indent}  }}")
    out.append(indent + "}")
    return out


def _prelude(kernel: Kernel) -> list[str]:
    lines = [f"void {kernel.name}(std::vector<torch::Tensor> t) {{",
             f"  TORCH_CHECK(t.size() == {len(kernel.operands)}, \"{kernel.name}: wrong operand count\");",
             "  TORCH_CHECK(t[0].device().is_cpu(), \"CPU tensors expected\");",
             f"  const kc::Geom g(t, {len(kernel.dims)});"]
    for i, op in enumerate(kernel.operands):
        const = "" if op.output else "const "
        lines.append(f"  {const}{op.ctype}* __restrict__ p{i} = t[{i}].data_ptr<{op.ctype}>();")
    expect = ", ".join(str(-1 if op.row else op.expect) for op in kernel.operands)
    lines += [f"  static const int expect[] = {{{expect}}};", "  const bool fast = g.fast(expect);",
              "  const int64_t O = g.O, L = g.L;", "  if (O == 0 || L == 0) return;"]
    return lines


def _bases(kernel: Kernel, indent: str) -> list[str]:
    return [f"{indent}const int64_t b{i} = g.base({i}, o);" for i in range(len(kernel.operands))]


def render_pointwise(kernel: Kernel) -> list[str]:
    values = [v for _, v in kernel.stores]
    lines = _prelude(kernel) + ["  const int64_t NB = (L + BLOCK - 1) / BLOCK;", PARALLEL_FOR.rstrip(),
                                "  for (int64_t w = 0; w < O * NB; ++w) {",
                                "    const int64_t o = w / NB, r0 = (w % NB) * BLOCK, r1 = std::min(L, r0 + BLOCK);"]
    lines += _bases(kernel, "    ")
    lines += _loop(kernel, values, _full_store_lines(kernel), "", "    ")
    return lines + ["  }", "}"]


def render_rows(kernel: Kernel) -> list[str]:
    levels = row_levels(kernel)
    load_row = _load_fn(kernel, "fast")
    lines = _prelude(kernel) + ["  auto row = [&](int64_t o, int par) {"] + _bases(kernel, "    ")

    def row_stmts(level: int) -> None:
        for s in levels.get(level, []):
            lines.append(f"    const {s.ctype} {s.var} = {substitute(s.expr, load_row)};")

    row_stmts(-1)
    for n, stage in enumerate(kernel.stages):
        init, update, result, clause = _STAGE[stage.kind]
        lines.append(f"    const kc::Acc a{n} = kc::split(par, L, [&](int64_t r0, int64_t r1) -> kc::Acc {{")
        lines.append(f"      {init}")
        body = _loop(kernel, [stage.value], [update.format(x=stage.value)], clause, "        ")
        if stage.kind == "sum":
            lines += ["      for (int64_t rb = r0; rb < r1; rb += 1024) {",
                      "        const int64_t r0_ = rb, r1_ = std::min(r1, rb + 1024);",
                      "        float part = 0;",
                      "        {", "        const int64_t r0 = r0_, r1 = r1_;"]
            lines += body + ["        }", "        acc += part;", "      }"]
        else:
            lines += body
        lines += [f"      return {result};", f"    }}, kc::c_{stage.kind});"]
        pick = "i" if stage.kind.startswith("arg") else "v"
        lines.append(f"    const {stage.ctype} {stage.result} = ({stage.ctype})a{n}.{pick};")
        row_stmts(n)
    if _full_store_lines(kernel):
        values = [v for i, v in kernel.stores if not kernel.operands[i].row]
        lines.append("    kc::each(par, L, [&](int64_t r0, int64_t r1) {")
        lines += _loop(kernel, values, _full_store_lines(kernel), "", "      ")
        lines.append("    });")
    for idx, value in kernel.stores:
        if kernel.operands[idx].row:
            lines.append(f"    p{idx}[b{idx}] = {value};")
    lines += ["  };", "  const int T = omp_get_max_threads();",
              "  if (O >= T || L < 8192) {", PARALLEL_FOR.rstrip(),
              "    for (int64_t o = 0; o < O; ++o) row(o, 1);",
              "  } else {", "    for (int64_t o = 0; o < O; ++o) row(o, T);", "  }", "}"]
    return lines


def scan_parts(kernel: Kernel) -> tuple[list[Stmt], list[Stmt]]:
    """A scan kernel's full-context statements: those the scanned value needs (before the
    update) and the rest of what the stores need (after it: they may read the scan's result)."""
    assert kernel.scan is not None
    before = closure(kernel, [kernel.scan.value])
    after = [s for s in closure(kernel, [v for _, v in kernel.stores]) if s not in before]
    return before, after


def scan_step(kernel: Kernel, acc: str, x: str) -> list[str]:
    """The running value's update by x, and the scan's result (read before the update when exclusive)."""
    scan = kernel.scan
    assert scan is not None
    update = f"{acc} {'*' if scan.kind == 'prod' else '+'}= (double)({x});"
    result = f"const {scan.ctype} {scan.result} = ({scan.ctype}){acc};"
    return [result, update] if scan.exclusive else [update, result]


def render_scan(kernel: Kernel) -> list[str]:
    scan, levels = kernel.scan, row_levels(kernel)
    assert scan is not None and set(levels) <= {-1}
    before, after = scan_parts(kernel)
    load_row = _load_fn(kernel, "fast")
    lines = _prelude(kernel) + [PARALLEL_FOR.rstrip(), "  for (int64_t o = 0; o < O; ++o) {"] + _bases(kernel, "    ")
    lines += [f"    const {s.ctype} {s.var} = {substitute(s.expr, load_row)};" for s in levels.get(-1, [])]
    lines.append(f"    double acc = {scan.identity};")
    for path in PATHS:
        load = _load_fn(kernel, path)
        lines.append("    if (fast) {" if path == "fast" else "    } else {")
        if path == "fast":
            lines += _hoisted(kernel, "      ")
        lines += ["      for (int64_t i = 0; i < L; ++i) {",
                  f"        const int64_t r = {'L - 1 - i' if scan.reverse else 'i'};"]
        body = [f"const {s.ctype} {s.var} = {s.expr};" for s in before] + scan_step(kernel, "acc", scan.value)
        body += [f"const {s.ctype} {s.var} = {s.expr};" for s in after] + _full_store_lines(kernel)
        for line in body:
            line = _ELEMENT.sub(lambda m, path=path: _element_ref(kernel, path, int(m.group(1))), line)
            lines.append(f"        {substitute(line, load)}")
        lines.append("      }")
    return lines + ["    }", "  }", "}"]


def render_cpu(plan: Plan) -> str:
    """The cpp_sources text: includes, helpers, one function per kernel."""
    parts = ["#include <torch/extension.h>", "#include <omp.h>", "#include <algorithm>", "#include <cmath>",
             "#include <cstring>", "#include <vector>", GEOM, CPU_HELPERS, CPU_MATH]
    kernels = []
    for kernel in plan.kernels:
        body = render_scan(kernel) if kernel.scan else render_rows(kernel) if kernel.dims else render_pointwise(kernel)
        kernels.append("\n".join(body) + "\n")
    if any(BATCH_VAR in k for k in kernels):  # a constant that follows the batch (batchdims.BatchScalar)
        parts.append(BATCH_SETTER)
    return "\n".join(parts + kernels)
