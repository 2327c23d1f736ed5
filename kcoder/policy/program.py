"""The complete candidate file: TUNE/CONFIG, the kernels' source, load_inline, and ModelNew
(Model's parameters and buffers under the same names, so the evaluator's state-dict copy
fills them; forward only allocates, takes views and calls the kernels)."""

from __future__ import annotations

from typing import Any

from kcoder.policy import emit_cpu, emit_cuda, native_forward
from kcoder.policy.batchdims import BATCH, BATCH_SETTER, BATCH_VAR, made_for
from kcoder.policy.graph import Graph
from kcoder.policy.kernel import Plan

HEADER = '''"""Written by kcoder's built-in policy (no LLM) from {problem}.

Kernels:
{kernels}
Every tensor a kernel reads is a view expanded to its domain (no copies). {how}
`kcoder tune` searches TUNE.
"""
'''

CPU_LOAD = '''

def _with_config(source: str) -> str:
    """CONFIG as #define lines after the leading #include block (same effect as -D flags, but
    the compile flags, and so the precompiled torch header, stay the same for every point)."""
    lines = source.splitlines(keepends=True)
    body = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#include"))
    defines = "".join(f"#define {{name}} {{int(value)}}\\n" for name, value in CONFIG.items())
    return "".join(lines[:body]) + defines + "".join(lines[body:])


_ext = load_inline(
    name="kcoder_builtin_cpu",
    cpp_sources=_with_config(CPP_SOURCE),
    functions={functions!r},
    extra_cflags={cflags!r},
    extra_ldflags={ldflags!r},
    verbose=False,
)
'''

CUDA_LOAD = '''

_ext = load_inline(
    name="kcoder_builtin_cuda",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions={functions!r},
    extra_cuda_cflags=["-O3", *[f"-D{{k}}={{v}}" for k, v in CONFIG.items()]],
    verbose=False,
)
'''

MODEL = '''

# (name, shape, dtype, kind) of Model's parameters and buffers: the evaluator copies their
# values from Model by name.
STATE = {state!r}
# (position, shape) of each tensor input the kernels were made for; None: any size there.
MADE_FOR = {made_for!r}
{check}

class ModelNew(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        for name, shape, dtype, kind in STATE:
            *path, leaf = name.split(".")
            owner = self
            for i, part in enumerate(path):
                if part not in dict(owner.named_children()):
                    owner.add_module(part, nn.Module())
                owner = self.get_submodule(".".join(path[:i + 1]))
            value = torch.empty(shape, dtype=getattr(torch, dtype))
            if kind == "param":
                owner.register_parameter(leaf, nn.Parameter(value))
            else:
                owner.register_buffer(leaf, value)

    def forward(self, *inputs):
{body}
'''


# forward's shape check in Python (a forward in C++ checks them there: native_forward.py)
CHECK_SHAPES = '''

def _check_shapes(inputs):
    for k, shape in MADE_FOR:
        got = tuple(inputs[k].shape)
        if len(got) != len(shape) or any(s is not None and s != g for s, g in zip(shape, got)):
            want = ", ".join("*" if s is None else str(s) for s in shape)
            raise ValueError(f"this kernel was made for inputs[{k}] of shape [{want}]; got {list(got)}: "
                             "generate it again for this shape")

'''


def _state(graph: Graph) -> list[tuple[str, tuple[int, ...], str, str]]:
    out = []
    for node in graph.nodes.values():
        if node.kind == "source" and node.op in ("param", "buffer"):
            out.append((node.attrs["key"], tuple(node.shape), node.dtype.replace("torch.", ""), node.op))
    return out


def _steps(plan: Plan, graph: Graph, batch_input: int | None, set_batch: bool = False) -> list[str]:
    """forward's steps in Python, before its return."""
    first = next((n.attrs["key"] for n in graph.nodes.values() if n.kind == "source" and n.op == "input"), None)
    lines = [f"_dev = inputs[{first}].device" if first is not None else "_dev = next(self.parameters()).device",
             "_check_shapes(inputs)"]
    if batch_input is not None:
        lines.append(f"{BATCH} = inputs[{batch_input}].shape[0]")
        if set_batch:  # the kernels' constants that follow the batch (batchdims.BATCH_SETTER)
            lines.append(f"_ext.{BATCH_VAR}_set({BATCH})")
    return lines + plan.lines


def render_program(plan: Plan, graph: Graph, device: str, problem: str, batch_input: int | None = None,
                   fixed: dict[str, emit_cuda.Choices] | None = None, native: bool = True) -> str:
    """The candidate file's text for `device` (cpu: C++/OpenMP; cuda: CUDA). batch_input: the
    input whose leading dim is the batch B that the graph's Dim sizes follow (batchdims.py);
    None: made for the captured shapes, which forward checks. fixed: the cuda kernels' choices
    made at the problem's own batch size (emit_cuda.units). native: forward's steps in C++
    where they translate (native_forward.py); False: in Python."""
    kernels = "\n".join(f"  {k.name}: {k.describe()}" for k in plan.kernels)
    set_batch = False
    functions = [k.name for k in plan.kernels]
    how = ("The kernels are generated for the shapes and strides the capture saw (the bindings check\n"
           "them); contiguous float data moves as 128-bit vectors." if device == "cuda" else
           "The kernels coalesce dims at run time and take a vectorized path when the innermost\n"
           "strides are the expected ones, a strided path otherwise.")
    if batch_input is not None:
        how += (f"\nMade for any batch size: {BATCH} is inputs[{batch_input}]'s leading dim at run time "
                "(the shapes above are the capture's).")
    parts: list[Any] = [HEADER.format(problem=problem, kernels=kernels, how=how),
                        "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n"]
    state, shapes = _state(graph), made_for(graph, batch_input is not None)
    if device == "cpu":
        parts.append(f"TUNE = {emit_cpu.TUNE!r}\nCONFIG = {emit_cpu.CONFIG!r}\n")
        cpp = emit_cpu.render_cpu(plan)
        set_batch = BATCH_SETTER in cpp
        functions += [f"{BATCH_VAR}_set"] if set_batch else []
        cpp, body = _forward(cpp, _steps(plan, graph, batch_input, set_batch), native, plan, state, shapes,
                             functions)
        parts.append(f'CPP_SOURCE = r"""\n{cpp}"""\n')
        parts.append(CPU_LOAD.format(functions=functions, cflags=emit_cpu.CFLAGS, ldflags=emit_cpu.LDFLAGS))
    else:
        set_batch = batch_input is not None  # its sizes that follow the batch: cuda_batch.py
        cpp, cuda = emit_cuda.render_cuda(plan, graph, set_batch, fixed)
        functions += [f"{BATCH_VAR}_set"] if set_batch else []
        cpp, body = _forward(cpp, _steps(plan, graph, batch_input, set_batch), native, plan, state, shapes,
                             functions)
        parts.append(f"TUNE = {emit_cuda.tune_space(cuda)!r}\nCONFIG = {emit_cuda.tune_config(cuda)!r}\n")
        parts.append(f'CPP_SOURCE = r"""\n{cpp}"""\n\nCUDA_SOURCE = r"""\n{cuda}"""\n')
        parts.append(CUDA_LOAD.format(functions=functions))
    check = "" if native_forward.NAME in functions else CHECK_SHAPES
    parts.append(MODEL.format(state=state, made_for=shapes, body="\n".join("        " + line for line in body),
                              check=check))
    return "\n".join(parts)


def _forward(cpp: str, steps: list[str], native: bool, plan: Plan, state: list[tuple[str, tuple[int, ...], str, str]],
             shapes: list[tuple[int, tuple[int | None, ...]]], functions: list[str]) -> tuple[str, list[str]]:
    """The binding's source and forward's body (lines): the steps as one C++ function where they
    translate and `native` asks for it (then `functions` also names it), else in Python."""
    translated = (native_forward.translate(steps, plan.returns, [(s[0], s[3]) for s in state], shapes)
                  if native else None)
    if translated is None:
        result = plan.returns[0] if len(plan.returns) == 1 else "(" + ", ".join(plan.returns) + ",)"
        return cpp, [*steps, f"return {result}"]
    functions.append(native_forward.NAME)
    return cpp + translated.cpp, translated.python
