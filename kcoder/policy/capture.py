"""Capture `Model.forward` as a flat ATen graph, in a child process, as JSON.

Why make_fx and not torch.export: make_fx traces the module once on the problem's own inputs
(as fake tensors: shapes and dtypes, no compute) and returns a flat graph of ATen ops with
every shape concrete, which is all a template generator needs. torch.export adds a strict
Python frontend (dynamo), dynamic-shape constraints and guards that a fixed KernelBench problem
does not have, and fails on more modules. The decomposition table is ATen's core set plus
softmax and losses (and normalizations written as means: decomp.py), so that those reach the planner as the reductions
and pointwise ops it knows (amax, sum, var_mean ... sub, exp, div).

The problem's code runs only here, in a child started with `capture_graph`: kcoder's own
process never imports a problem file (problem.py reads them statically).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from kcoder.evaluate.options import confined_problem
from kcoder.policy.schema import MAX_TEXT, WORD
from kcoder.procs import RunResult, run
from kcoder.trust import read_plain

CAPTURE_TIMEOUT_S = 300.0
MAX_GRAPH_BYTES = 64 * 2**20  # far above any module's graph; a bigger file is refused unread
BATCHES = "batches.json"  # the graphs at other batch sizes (batchdims.py: a kernel for any batch)
BATCH_SIZES = (3, 5, 7)  # the other batch sizes traced: the first two unlike the problem's own


class CaptureError(Exception):
    """The module could not be traced; str() names the problem file and the cause."""


def capture_graph(problem: Path, work: Path, timeout_s: float = CAPTURE_TIMEOUT_S,
                  sandbox: str = "auto") -> dict[str, Any]:
    """The problem's graph as JSON data (see `_serialize`), traced in a child process and
    checked against the schema (schema.validate_graph) before anything reads it; kept as
    work/graph.json. The child gets a scrubbed environment (no credentials) and a private
    HOME and TMPDIR; a problem from an MCP client (`confined_problem`) runs from a copy, in
    the sandbox `sandbox` names ("bwrap" that cannot run here: ValueError)."""
    import tempfile

    from kcoder.evaluate.sandbox import Box, confined_command, kill_all, resolve_mode

    work.mkdir(parents=True, exist_ok=True)
    confined = confined_problem()
    # the user's own problem runs as in the reference process (never in bwrap), an MCP client's
    # as the candidate does; both without kcoder's environment
    mode = resolve_mode(sandbox)[0] if confined else "none"
    with tempfile.TemporaryDirectory(prefix="kcoder-capture-") as tmp:
        box = Box.create(Path(tmp))
        source = problem.resolve()  # resolved: the child runs in the box, where a relative path names nothing
        read_only = []
        if confined:
            source = box.root / problem.name
            shutil.copyfile(problem, source)
            read_only = [source]
        out = box.root / "graph.json"
        argv, env = confined_command([sys.executable, "-m", "kcoder.policy.capture", str(source), str(out)],
                                     box, "cpu", mode, read_only)
        try:
            res = run(argv, timeout_s, cwd=box.root, env=env)
        finally:
            kill_all(box.marker)
        data = _graph(problem, out, res)
        batches = _batches(problem, out.with_name(BATCHES))
    (work / "graph.json").write_text(json.dumps(data))
    if batches:
        (work / BATCHES).write_text(json.dumps(batches))
        data["batches"] = batches
    return data


def _graph(problem: Path, out: Path, res: RunResult) -> dict[str, Any]:
    """The child's graph, read as data: no link followed, size bounded, schema checked."""
    from kcoder.policy.schema import GraphSchemaError, validate_graph

    if res.rc != 0 or not out.is_file():
        lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
        why = "timed out" if res.timed_out else (lines[-1] if lines else f"exit code {res.rc}")
        raise CaptureError(f"{problem}: could not trace Model.forward: {why}")
    refused = f"{problem}: the captured graph {out.name} is refused"
    try:
        raw = read_plain(out, limit=MAX_GRAPH_BYTES + 1)  # a regular file, no link followed
    except OSError as exc:
        raise CaptureError(f"{refused}: it could not be read ({exc.strerror or exc})") from None
    if len(raw) > MAX_GRAPH_BYTES:
        raise CaptureError(f"{refused}: larger than {MAX_GRAPH_BYTES // 2**20} MiB")
    try:
        return validate_graph(json.loads(raw))
    except (ValueError, RecursionError) as exc:  # GraphSchemaError, or not JSON at all
        what = "" if isinstance(exc, GraphSchemaError) else "not JSON: "
        raise CaptureError(f"{refused}: {what}{exc}") from None


def _batches(problem: Path, path: Path) -> dict[str, Any] | None:
    """The graphs traced at other batch sizes (`_trace_batches`), each schema-checked, or None
    when the child wrote none (the module does not trace at another batch size)."""
    from kcoder.policy.schema import GraphSchemaError, validate_graph

    if not path.is_file():
        return None
    try:
        raw = json.loads(read_plain(path, limit=4 * MAX_GRAPH_BYTES + 1))
        sizes, scaled = raw["sizes"], raw["scaled"]
        if not (isinstance(sizes, list) and isinstance(scaled, list) and len(sizes) == len(raw["graphs"]) + 1
                and all(type(v) is int and v > 0 for v in sizes) and scaled
                and all(type(v) is int and v >= 0 for v in scaled)):
            raise GraphSchemaError("sizes and scaled: lists of integers expected (sizes positive)")
        return {"sizes": sizes, "scaled": scaled, "graphs": [validate_graph(g) for g in raw["graphs"]]}
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise CaptureError(f"{problem}: the graphs at other batch sizes ({path.name}) are refused: {exc}") from None


def _decompositions() -> dict[Any, Any]:
    import torch
    from torch._decomp import core_aten_decompositions, get_decompositions

    aten = torch.ops.aten
    table = dict(core_aten_decompositions())
    from kcoder.policy import decomp

    table.update(get_decompositions([
        aten._softmax, aten._log_softmax, aten.logsumexp, aten.mse_loss, aten.smooth_l1_loss,
        aten.huber_loss, aten.l1_loss, aten.addmm,
        aten.rms_norm, aten.linear, aten.matmul, aten.nll_loss_forward, aten.binary_cross_entropy,
    ]))
    table.update(decomp.table())  # normalizations as means (decomp.py says why)
    table.pop(aten.mish.default, None)  # one op: ops.py's closed form is 3 transcendentals cheaper
    return table


def _arg(value: Any) -> Any:
    import torch
    import torch.fx

    if isinstance(value, torch.fx.Node):
        return {"ref": value.name}
    if isinstance(value, (list, tuple)):
        return [_arg(v) for v in value]
    if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return {"const": _word(str(value))}
    if isinstance(value, str):
        return value if WORD.fullmatch(value) else {"const": "unrepresentable_text"}
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return {"const": _word(repr(value))}


def _word(text: str) -> str:
    """`text` as the schema's short word (an einsum equation or an object's repr is no word)."""
    return text if WORD.fullmatch(text) else ("v_" + re.sub(r"\W", "_", text))[:MAX_TEXT]


def _op_name(node: Any) -> str:
    """The node's op as the schema knows it: an ATen or prims op by its registry name, getitem,
    else `kind:identifier` (graph.py leaves those unsupported, named)."""
    import operator

    import torch

    target = node.target
    if node.op == "call_function" and isinstance(target, torch._ops.OpOverload) and \
            str(target).split(".")[0] in ("aten", "prims"):
        return str(target)
    if node.op == "call_function" and target is operator.getitem:
        return "<built-in function getitem>"
    name = getattr(target, "__name__", None) or str(target)
    return f"{node.op}:" + re.sub(r"\W", "_", f"_{name}" if name[:1].isdigit() else name)[:MAX_TEXT - 20]


def _meta(node: Any) -> dict[str, Any]:
    import torch

    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return {"shape": list(val.shape), "dtype": str(val.dtype)}
    if isinstance(val, (list, tuple)):
        return {"shape": None, "dtype": None, "items": [
            {"shape": list(v.shape), "dtype": str(v.dtype)} if isinstance(v, torch.Tensor) else None
            for v in val]}
    return {"shape": None, "dtype": None}


def _serialize(gm: Any, placeholders: list[dict[str, Any]], n_inputs: int) -> dict[str, Any]:
    nodes, outputs = [], []
    kinds = iter(placeholders)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            nodes.append({"name": node.name, "op": "placeholder", **next(kinds), **_meta(node)})
        elif node.op == "call_function":
            nodes.append({"name": node.name, "op": _op_name(node), "args": _arg(list(node.args)),
                          "kwargs": {k: _arg(v) for k, v in node.kwargs.items()}, **_meta(node)})
        elif node.op == "output":
            result = node.args[0]
            outputs = [_arg(r) for r in (result if isinstance(result, (list, tuple)) else [result])]
        elif node.op == "get_attr" and (value := _scalar(getattr(gm, node.target, None))) is not None:
            # a 0-d constant built in forward (`torch.tensor(0.5)`): its value is all a kernel needs
            nodes.append({"name": node.name, "op": "constant", "value": value, "shape": [],
                          "dtype": str(getattr(gm, node.target).dtype)})
        else:
            nodes.append({"name": node.name, "op": _op_name(node), "shape": None, "dtype": None})
    return {"nodes": nodes, "outputs": outputs, "n_forward_args": n_inputs}


def _scalar(value: Any) -> float | int | None:
    """The Python value of a 0-d real, non-bool tensor (None for anything else, fake tensors included)."""
    import torch

    if not isinstance(value, torch.Tensor) or value.dim() != 0 or value.is_complex() or value.dtype == torch.bool:
        return None  # (a bool constant would need its own spelling in the templates: left unsupported)
    try:
        return value.item()
    except Exception:  # noqa: BLE001  a fake or meta tensor has no value
        return None


def _load(problem: Path) -> tuple[Any, list[Any]]:
    import importlib.util

    spec = importlib.util.spec_from_file_location("kcoder_policy_problem", problem)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    model = module.Model(*module.get_init_inputs())  # training mode, as the evaluator runs it
    return model, list(module.get_inputs())


def _trace(model: Any, inputs: list[Any]) -> dict[str, Any]:
    import torch
    from torch.func import functional_call
    from torch.fx.experimental.proxy_tensor import make_fx

    params = dict(model.named_parameters())
    persistent = set(model.state_dict())
    buffers = dict(model.named_buffers())
    names = list(params) + list(buffers)
    tensor_pos = [i for i, v in enumerate(inputs) if isinstance(v, torch.Tensor)]
    placeholders = [{"role": "param", "key": n} for n in params]
    placeholders += [{"role": "buffer" if n in persistent else "constant_buffer", "key": n} for n in buffers]
    # an input's strides too: the cuda target renders its kernels for them (geometry.py)
    placeholders += [{"role": "input", "key": i, "stride": list(inputs[i].stride())} for i in tensor_pos]

    def forward(*args: Any) -> Any:
        state = dict(zip(names, args[:len(names)], strict=True))
        full = list(inputs)
        for pos, value in zip(tensor_pos, args[len(names):], strict=True):
            full[pos] = value
        with PythonLevel():  # inside the trace: make_fx sets its own function modes aside
            return functional_call(model, state, tuple(full))

    from kcoder.policy.decomp import PythonLevel

    with torch.no_grad():
        gm = make_fx(forward, decomposition_table=_decompositions(), tracing_mode="fake")(
            *params.values(), *buffers.values(), *(inputs[i] for i in tensor_pos))
    return _serialize(gm, placeholders, len(inputs))


def batch_plan(inputs: list[Any]) -> tuple[list[int], list[int]] | None:
    """(the other batch sizes, the positions of the inputs they scale): the inputs that carry the
    batch as the judge's drawn batch sizes see them (harness/verify.batch_positions); None without."""
    from kcoder.evaluate.harness.verify import batch_positions

    scaled = batch_positions(inputs)
    if not scaled or inputs[scaled[0]].shape[0] == 0:
        return None
    batch = inputs[scaled[0]].shape[0]
    return [b for b in BATCH_SIZES if b != batch][:2], scaled


def _rows(value: Any, b: int) -> Any:
    """`value` with b rows: its first ones, repeated when it has fewer (index inputs stay in range)."""
    import torch

    n = value.shape[0]
    return (value if n >= b else torch.cat([value] * -(-b // n))).narrow(0, 0, b).clone()


def _trace_batches(model: Any, inputs: list[Any]) -> dict[str, Any] | None:
    """The graph at each other batch size (`_rows` of the scaled inputs), or None when the module
    does not trace at one of them."""
    plan = batch_plan(inputs)
    if plan is None:
        return None
    sizes, scaled = plan
    graphs = []
    for b in sizes:
        cut = [_rows(v, b) if i in scaled else v for i, v in enumerate(inputs)]
        try:
            graphs.append(_trace(model, cut))
        except Exception:  # noqa: BLE001  made for its own batch size (it reshapes by a constant ...)
            return None
    return {"sizes": [inputs[scaled[0]].shape[0], *sizes], "scaled": scaled, "graphs": graphs}


def main() -> None:
    problem, out = Path(sys.argv[1]), Path(sys.argv[2])
    try:
        model, inputs = _load(problem)
        data = _trace(model, inputs)
        batches = _trace_batches(model, inputs)
    except Exception as exc:  # the parent reports the last line: the cause, in one line
        print(f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}",
              file=sys.stderr)
        sys.exit(1)
    out.write_text(json.dumps(data))
    if batches:
        out.with_name(BATCHES).write_text(json.dumps(batches))


if __name__ == "__main__":
    main()
