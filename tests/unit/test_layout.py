"""The package's shape, read from its source: no import cycle among kcoder's modules, no
module over 400 lines, no function over 12 parameters."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import ROOT

PACKAGE = ROOT / "kcoder"
MAX_LINES = 400
MAX_PARAMS = 12


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package is its __init__)."""
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The kcoder modules a module imports, anywhere in it (top level, functions, TYPE_CHECKING).

    `from a.b import c` names the module a.b.c when that is a module, else a.b; an import
    of a.b.c does not count as importing the package a.b (its __init__)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor[:len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in known else base)
    return {target for target in found if target in known and target != name}


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imported_modules(name, path, known) for name, path in mods.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each as a cycle path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_the_walk_sees_the_package():
    graph = import_graph()
    assert {"kcoder.cli", "kcoder.evaluate", "kcoder.evaluate.candidate.worker", "kcoder.agent.loop"} <= set(graph)
    assert graph["kcoder.cli"], "the CLI imports kcoder modules: the walk must find them"


def test_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert find_cycles(graph) == [["a", "b", "c"]]


def test_relative_imports_resolve(tmp_path):
    path = tmp_path / "__init__.py"
    path.write_text("from . import x\nfrom .y import z\nfrom ..w import v\n")
    known = {"p.q", "p.q.x", "p.q.y", "p.w"}
    assert imported_modules("p.q", path, known) == {"p.q.x", "p.q.y", "p.w"}


def test_no_import_cycle_among_kcoder_modules():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles among kcoder modules:\n" + "\n".join(
        " <-> ".join(cycle) for cycle in cycles)


def test_no_module_over_400_lines():
    long = {str(path.relative_to(ROOT)): n for path in PACKAGE.rglob("*.py")
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    return (len(args.posonlyargs) + len(args.args) + len(args.kwonlyargs)
            + (args.vararg is not None) + (args.kwarg is not None))


def test_no_function_over_12_parameters():
    wide = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and parameter_count(node) > MAX_PARAMS:
                wide.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({parameter_count(node)})")
    assert not wide, f"functions over {MAX_PARAMS} parameters: {wide}"


# Packages from the bottom up: a module may import its own package and those below it, never one
# above (also not inside a function, where an import hides). Packages not listed are not checked.
LAYERS = ["build", "evaluate", "profile", "policy", "agent", "tune", "chat", "mcp", "suite", "env"]
# None left: the device ceilings both evaluate/ and profile/ read live below them (device_limits.py).
KNOWN_UPWARD: set[tuple[str, str]] = set()


def layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) >= 2 and parts[1] in LAYERS else None


def test_no_import_goes_up_a_layer():
    upward = sorted((a, b) for a, targets in import_graph().items() for b in targets
                    if layer(a) is not None and layer(b) is not None and layer(b) > layer(a))
    assert set(upward) <= KNOWN_UPWARD, "imports that go up a layer:\n" + "\n".join(
        f"{a} -> {b}" for a, b in upward if (a, b) not in KNOWN_UPWARD)


def test_the_leaves_import_nothing_of_kcoder():
    """The option values and the model's reply types are below everything that uses them."""
    graph = import_graph()
    assert graph["kcoder.choices"] == set() and graph["kcoder.replies"] == set()


# The trust boundary (kcoder/evaluate/candidate/__init__.py): code that runs in the candidate's
# process lives in evaluate/candidate/, and nothing that the judge or the reference runs imports it.
CANDIDATE = "kcoder.evaluate.candidate"
HARNESS = "kcoder.evaluate.harness"


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every kcoder module that importing `start` runs: its imports and, as Python does, the
    packages above each (their __init__)."""
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
            parts = node.split(".")
            todo.extend(p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p in graph)
    return seen


def test_nothing_outside_the_candidates_package_imports_it():
    graph = import_graph()
    leaks = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                   if b.startswith(CANDIDATE) and not a.startswith(CANDIDATE))
    assert not leaks, "trusted code importing code of the candidate's process:\n" + "\n".join(leaks)


def test_the_reference_process_runs_none_of_the_candidates_code():
    graph = import_graph()
    assert graph["kcoder.evaluate.reference.server"], "the walk must see the reference's imports"
    assert not {m for m in reachable(graph, "kcoder.evaluate.reference.server") if m.startswith(CANDIDATE)}


def test_the_candidates_process_runs_its_package_and_the_harness_of_the_evaluator():
    """Of the evaluator, the worker reaches its own package, the shared harness and the options:
    no module of the judge's (which would then run, untrusted, beside the candidate)."""
    graph = import_graph()
    evaluator = {m for m in reachable(graph, f"{CANDIDATE}.worker") if m.startswith("kcoder.evaluate")}
    assert f"{HARNESS}.batchrun" in evaluator and f"{CANDIDATE}.outbox" in evaluator
    others = evaluator - {"kcoder.evaluate", "kcoder.evaluate.options"}  # the package's __init__ is lazy
    others = {m for m in others if not m.startswith((CANDIDATE, HARNESS))}
    assert not others, f"judge-side modules the candidate's process imports: {sorted(others)}"


def test_what_a_cpu_batch_is_judged_by_runs_outside_the_candidates_process():
    """Issue 45: on the cpu target the candidate's process only computes. The arena's making and
    reading, the freeze, the judge's draw of weights are trusted code that the reference process or
    the judge runs; the candidate's process reaches only the arena's mapping (harness/arena.py)."""
    graph = import_graph()
    worker = reachable(graph, f"{CANDIDATE}.worker")
    trusted = {"kcoder.evaluate.arenaclock", "kcoder.evaluate.freeze", "kcoder.evaluate.drawnweights",
               "kcoder.evaluate.reference.arenaprep", "kcoder.evaluate.reference.drawweights"}
    assert f"{HARNESS}.arena" in worker
    assert not trusted & worker, sorted(trusted & worker)
    reference = reachable(graph, "kcoder.evaluate.reference.server")
    assert {"kcoder.evaluate.reference.arenaprep", "kcoder.evaluate.reference.drawweights"} <= reference
