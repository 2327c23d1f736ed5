"""Static checks on a candidate's Python (the AST): what the code *does*, not what it imports.

A module whose every use is a trick (threading, subprocess, ctypes, socket, pickle, torch's
compiler and mode machinery) is refused at its import. Modules with honest uses are judged by
the names the code reaches in them: `inspect.signature` is fine, `inspect.currentframe` is frame
walking; `importlib.util.find_spec` is fine, `importlib.reload` is not; `os.environ.get` of a
build variable is fine, of anything else it reads secrets. Every reference counts, called or
not (`f = inspect.stack` is refused like `inspect.stack()`), and so does `getattr(module, "x")`.
"""

from __future__ import annotations

import ast
import re

from kcoder.evaluate.static import names, rules
from kcoder.evaluate.static.fold import Folder
from kcoder.evaluate.static.names import FOLD_BUDGET, HARMLESS_DUNDERS, const_str, dotted
from kcoder.evaluate.static.native import native_findings


class Checker(ast.NodeVisitor):
    def __init__(self, allow: list[str], reference_stems: set[str]) -> None:
        self.allow = allow
        self.reference_stems = reference_stems
        self.aliases: dict[str, str] = {}  # local name -> module path
        self.findings: list[tuple[str, int, str]] = []
        self.cleared: set[int] = set()  # nodes a parent judged already (allowed shapes)
        self.path_names: set[str] = set()  # local names bound to pathlib paths
        self.depth = 0  # function/class nesting
        self.docstrings: set[int] = set()
        self.fold = Folder(ast.Module(body=[], type_ignores=[]))
        self.folded: set[int] = set()  # nodes inside an expression whose whole string was checked
        self.named: set[int] = set()  # strings judged as an attribute name (getattr(x, "..."))
        self.called: set[int] = set()  # `getattr` as the function of a call (not passed around)
        # Characters of built strings the native rules may still read (`"a" * 10**6` costs the
        # file 12 bytes): past it, the build service's check of the compiled text stands alone.
        self.fold_budget = FOLD_BUDGET

    def add(self, node: ast.AST, check: str, message: str) -> None:
        self.findings.append((check, getattr(node, "lineno", 0), message))

    def resolve(self, name: str) -> str:
        head, _, rest = name.partition(".")
        base = self.aliases.get(head, head)
        return f"{base}.{rest}" if rest else base

    def run(self, tree: ast.Module) -> None:
        self.fold = Folder(tree)
        uses_doc = any(isinstance(n, ast.Name) and n.id == "__doc__" for n in ast.walk(tree))
        for node in ast.walk(tree):  # docstrings are never compiled, unless __doc__ is read
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and not uses_doc:
                body = node.body
                if body and isinstance(body[0], ast.Expr) and const_str(body[0].value) is not None:
                    self.docstrings.add(id(body[0].value))
        self.visit(tree)

    def visit(self, node: ast.AST) -> None:
        # A string built from constants (`"cudaStre" + "amCreate"`, f-strings, joins, `%`,
        # `.format`) is checked whole, as the program builds it, besides each of its constants.
        if isinstance(node, names.folded) and id(node) not in self.folded:
            value = self.fold.string(node)
            if value is not None:
                self.folded.update(id(n) for n in ast.walk(node))
                self.fold_budget -= len(value)
                self._check_string(node, value, whole=id(node) not in self.named, native=self.fold_budget >= 0)
        super().visit(node)

    # -- imports ---------------------------------------------------------------------------
    def _check_module(self, node: ast.AST, module: str, imported_name: bool = False) -> None:
        root = module.split(".")[0]
        if root in self.reference_stems or module == "__main__":
            self.add(node, "reference-access", f"imports the reference problem `{module}`")
        for denied, (check, message) in rules.DENY_IMPORTS.items():
            if module == denied or module.startswith(denied + "."):
                self.add(node, check, f"{message} (`import {module}`)")
                return
        if imported_name:  # `from inspect import currentframe` reaches the name itself
            self._check_reference(node, module, importing=True)
        elif root in rules.ALLOW_ONLY and not rules.allowed_path(module, importing=True):
            check, message = rules.ALLOW_ONLY[root][1:]
            self.add(node, check, f"{message} (`import {module}`)")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(node, alias.name)
            self.aliases[(alias.asname or alias.name).split(".")[0]] = (
                alias.name if alias.asname else alias.name.split(".")[0])
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.add(node, "reference-access", "uses a relative import (the reference lives beside it)")
        self._check_module(node, module)
        for alias in node.names:
            full = f"{module}.{alias.name}"
            self._check_module(node, full, imported_name=True)
            self.aliases[alias.asname or alias.name] = full
        self.generic_visit(node)

    # -- references: every name the code reaches in a module ----------------------------------
    def _check_reference(self, node: ast.AST, path: str, importing: bool = False) -> None:
        if importing and path in rules.MEMOISERS:
            return  # judged where it decorates (a cached kernel builder is fine)
        parts = path.split(".")
        # `torch.utils.cpp_extension.os.fork` is `os.fork`: a module reached through another.
        # (torch's own submodules that share a name, such as torch.signal, are judged as torch's.)
        for start in range(len(parts)):
            if start == 0 or (parts[start] in rules.MODULE_ROOTS and parts[start - 1] != "torch"):
                if self._refused(node, ".".join(parts[start:]), importing):
                    return

    def _refused(self, node: ast.AST, path: str, importing: bool) -> bool:
        for table in (rules.DENY_REFS, {} if importing else rules.DENY_IMPORTS):
            for denied, (check, message) in table.items():
                if path == denied or path.startswith(denied + "."):
                    self.add(node, check, f"{message} (`{path}`)")
                    return True
        root = path.split(".")[0]
        if root in rules.ALLOW_ONLY and not rules.allowed_path(path, importing):
            check, message = rules.ALLOW_ONLY[root][1:]
            self.add(node, check, f"{message} (`{path}`)")
            return True
        if path in rules.SENSITIVE_MODULES and not importing:
            self.add(node, "introspection", f"passes the module `{path}` around (its uses cannot be checked)")
            return True
        if not importing and (path.split(".")[:2] == ["os", "environ"] or path in ("os.getenv", "os.environb")):
            self.add(node, "secrets", f"reads or changes the environment (`{path}`); only "
                     f"{', '.join(sorted(rules.ENV_READ))} may be read")
            return True
        return False

    def visit_Name(self, node: ast.Name) -> None:
        if id(node) in self.cleared or not isinstance(node.ctx, ast.Load):
            return
        if node.id in self.aliases:
            self._check_reference(node, self.aliases[node.id])
        elif node.id in rules.DENY_BUILTINS:
            check, message = rules.DENY_BUILTINS[node.id]
            self.add(node, check, f"{message} (`{node.id}`)")
        elif node.id in ("getattr", "hasattr") and id(node) not in self.called:
            self.add(node, "introspection", f"passes `{node.id}` around (the attribute names it reaches "
                     "cannot be checked)")

    def _attribute(self, node: ast.AST, attr: str, how: str) -> bool:
        """The rules on an attribute's name, reached as `.attr` or by name (`how` says which);
        whether one refused it."""
        refused = False
        for attrs, check, message in ((rules.FRAME_ATTRS, "introspection", "walks frames or function internals"),
                                      (rules.EVASION_ATTRS, "guard-evasion", "inspects or disables torch's modes"),
                                      (rules.FILE_ATTRS, "file-io", "reads or writes files"),
                                      (rules.LOADER_ATTRS, "dynamic-code",
                                       "loads or reads modules through their loader")):
            if attr in attrs:
                self.add(node, check, f"{message} ({how})")
                refused = True
        return refused

    def _attribute_by_name(self, node: ast.Call, name_node: ast.AST, call: str) -> str | None:
        """`getattr(x, "__code__")` and the like: the name (folded from constants) judged as
        `x.__code__` is, and any other dunder refused but the harmless ones (a name, a length,
        a docstring: honest code asks `hasattr(x, "__len__")`)."""
        attr = self.fold.string(name_node)
        if attr is None:
            return None
        self.named.add(id(name_node))
        for part in attr.split(".") if call == "operator.attrgetter" else [attr]:
            how = f"`{call}(..., {part!r})`"
            if not self._attribute(node, part, how) and names.dunder.match(part) and part not in HARMLESS_DUNDERS:
                self.add(node, "introspection", f"reaches the attribute `{part}` by name ({how}): "
                         "object and function internals are not a kernel's business")
        return attr

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._attribute(node, node.attr, f"`.{node.attr}`")
        name = dotted(node)
        if name and id(node) not in self.cleared:
            # Judge the whole chain once (`importlib.util.find_spec`, not `importlib.util` too).
            self._clear_chain(node.value)
            path = self.resolve(name)
            if name.split(".")[0] in self.aliases:
                self._check_reference(node, path)
            if path.startswith(("torch._C", "torch._dynamo")):
                self.add(node, "guard-evasion", f"reaches into torch internals (`{path}`)")
        self.generic_visit(node)

    def _clear_chain(self, node: ast.AST) -> None:
        while isinstance(node, ast.Attribute):
            self.cleared.add(id(node))
            node = node.value
        self.cleared.add(id(node))

    # -- calls -----------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        name = self.resolve(dotted(node.func)) if dotted(node.func) else ""
        first = const_str(node.args[0]) if node.args else None
        if name == "setattr" and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == "self":
            self.cleared.add(id(node.func))  # registering its own parameters and buffers
        if isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
            self.called.add(id(node.func))
        attr = None
        if name in names.by_name and len(node.args) > names.by_name[name]:
            attr = self._attribute_by_name(node, node.args[names.by_name[name]], name)
        elif name == "operator.attrgetter":
            for arg in node.args:
                self._attribute_by_name(node, arg, name)
        elif isinstance(node.func, ast.Attribute) and node.func.attr in names.by_name_methods:
            for arg in node.args[:2]:  # `object.__getattribute__(x, "n")`, `x.__getattribute__("n")`
                self._attribute_by_name(node, arg, f".{node.func.attr}")
        if name in ("getattr", "hasattr", "delattr") and node.args:
            self._dynamic_attribute(node, name, attr)
        if name in ("importlib.import_module", "importlib.util.find_spec"):
            self._clear_chain(node.func)
            if first is None:
                self.add(node, "dynamic-code", f"names a module computed at run time (`{name}`)")
            else:
                self._check_module(node, first)
        if name in ("os.getenv", "os.environ.get", "os.environ.setdefault"):
            self._environment(node, name, first)
        if isinstance(node.func, ast.Attribute):
            self._path_method(node, node.func)
        self.generic_visit(node)

    def _imported_module(self, value: ast.AST) -> str | None:
        if isinstance(value, ast.Call) and self.resolve(dotted(value.func)) == "importlib.import_module":
            return const_str(value.args[0]) if value.args else None
        return None

    def _dynamic_attribute(self, node: ast.Call, name: str, attr: str | None) -> None:
        target = dotted(node.args[0])
        module = self.resolve(target) if target and target.split(".")[0] in self.aliases else ""
        if module and attr is not None:
            self._check_reference(node, f"{module}.{attr}")
        elif module and (module.split(".")[0] in rules.SENSITIVE_MODULES or module in rules.SENSITIVE_MODULES):
            self.add(node, "introspection", f"looks up a computed attribute of `{module}` ({name})")
        if module:
            self._clear_chain(node.args[0])

    def _environment(self, node: ast.Call, name: str, key: str | None) -> None:
        self._clear_chain(node.func)
        allowed = rules.ENV_WRITE if name.endswith("setdefault") else rules.ENV_READ
        if key is None or key not in allowed:
            what = "changes" if name.endswith("setdefault") else "reads"
            self.add(node, "secrets", f"{what} the environment variable {key or '(computed name)'} (`{name}`); "
                     f"only {', '.join(sorted(allowed))} may be")

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if self.resolve(dotted(node.value)) == "os.environ" and dotted(node.value):
            self._clear_chain(node.value)
            key = const_str(node.slice)
            allowed = rules.ENV_WRITE if isinstance(node.ctx, ast.Store) else rules.ENV_READ
            if key not in allowed:
                self.add(node, "secrets", f"{'changes' if isinstance(node.ctx, ast.Store) else 'reads'} the "
                         f"environment variable {key or '(computed name)'}; only {', '.join(sorted(allowed))} may be")
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        # `"TORCH_CUDA_ARCH_LIST" in os.environ` reads one allowed name.
        for op, right in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, (ast.In, ast.NotIn)) and self.resolve(dotted(right)) == "os.environ" and dotted(right):
                self._clear_chain(right)
                if const_str(node.left) not in rules.ENV_READ:
                    self.add(node, "secrets", "tests the environment for a variable outside the build variables")
        self.generic_visit(node)

    # -- pathlib: files are read and written through path objects ---------------------------
    def _is_path(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Call):
            return self.resolve(dotted(node.func)) in rules.PATH_TYPES or (
                isinstance(node.func, ast.Attribute) and self._is_path(node.func.value))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return self._is_path(node.left)
        if isinstance(node, ast.Attribute):
            return node.attr in ("parent", "parents") or self._is_path(node.value)
        if isinstance(node, ast.Subscript):
            return self._is_path(node.value)
        return isinstance(node, ast.Name) and node.id in self.path_names

    def _path_method(self, node: ast.Call, func: ast.Attribute) -> None:
        if func.attr in rules.PATH_METHODS and self._is_path(func.value):
            self.add(node, "file-io", f"reads, writes or lists files through pathlib (`.{func.attr}(...)`)")

    # -- assignments -------------------------------------------------------------------------
    def _check_target(self, target: ast.AST) -> None:
        node = target.value if isinstance(target, ast.Subscript) else target
        name = dotted(node) if isinstance(node, ast.Attribute) else ""
        if name:
            root = name.split(".")[0]
            module = self.resolve(name)
            if module == "os.environ" and isinstance(target, ast.Subscript):
                return  # visit_Subscript judges the variable
            if root in self.aliases or root in rules.PATCHABLE_ROOTS:
                check = "precision" if "allow_tf32" in name or "backends" in module else "monkeypatch"
                self.add(target, check, f"assigns to `{module}` (patching a module, timer or setting)")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_target(target)
            if isinstance(target, ast.Name):
                (self.path_names.add if self._is_path(node.value) else self.path_names.discard)(target.id)
                imported = self._imported_module(node.value)
                if imported:  # `m = importlib.import_module("os")` makes `m` the module
                    self.aliases[target.id] = imported
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        self.add(node, "state", f"declares global {', '.join(node.names)} (state between calls)")

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.add(node, "state", f"declares nonlocal {', '.join(node.names)} (state between calls)")

    # -- control flow ------------------------------------------------------------------------
    def visit_Try(self, node: ast.Try) -> None:
        if not (self.depth == 0 and rules.optional_import(node)):
            self.add(node, "fallback", "uses try/except (a handler can hide a torch fallback or detect the guard)")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            call = item.context_expr
            name = self.resolve(dotted(call.func)) if isinstance(call, ast.Call) and dotted(call.func) else ""
            if name.endswith("suppress"):
                self.add(node, "fallback", "suppresses exceptions (contextlib.suppress)")
        self.generic_visit(node)

    def _memoised(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """`@functools.lru_cache` / `@cache` builds a kernel once (fine: a module-level function
        with no parameters, or one that calls load_inline); on anything else it memoises results."""
        for decorator in node.decorator_list:
            func = decorator.func if isinstance(decorator, ast.Call) else decorator
            if self.resolve(dotted(func)) not in rules.MEMOISERS:
                continue
            self._clear_chain(func)
            builds = any(isinstance(n, ast.Call) and self.resolve(dotted(n.func)).endswith("load_inline")
                         for n in ast.walk(node))
            takes_nothing = not (node.args.posonlyargs or node.args.args or node.args.vararg or node.args.kwonlyargs)
            if self.depth > 0 or not (builds or takes_nothing):
                self.add(decorator, "state", f"memoises results of {node.name} (only a module-level kernel "
                         "builder may be cached)")

    def _swallows(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """An `__exit__` that may return something true swallows the exception of its `with`
        body: a try/except by another name (a build's failure, a guard's refusal)."""
        if node.name not in ("__exit__", "__aexit__"):
            return
        for sub in ast.walk(node):
            if isinstance(sub, ast.Return) and sub.value is not None and not (
                    isinstance(sub.value, ast.Constant) and not sub.value.value):
                self.add(node, "fallback", f"defines {node.name} that can return true (swallows exceptions, "
                         "as try/except does)")
                return

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._memoised(node)
        self._swallows(node)
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            if self.resolve(dotted(base)) in ("torch.Tensor", "torch._tensor.Tensor"):
                self.add(node, "tensor-subclass", f"class {node.name} subclasses torch.Tensor (lazy/fake outputs)")
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name in ("__torch_function__", "__torch_dispatch__"):
                self.add(item, "tensor-subclass", f"defines {item.name} (intercepts torch calls)")
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    # -- strings: C++/CUDA sources and paths -------------------------------------------------
    def visit_Constant(self, node: ast.Constant) -> None:
        if not isinstance(node.value, str) or id(node) in self.docstrings:
            return
        self._check_string(node, node.value, whole=id(node) not in self.named)

    def _check_string(self, node: ast.AST, value: str, whole: bool = True, native: bool = True) -> None:
        """A string of the program (a constant, or one built from constants): the native rules,
        the reference's file name, and a function internal's name on its own (`"__code__"`,
        which reaches the attribute by name wherever the string goes)."""
        for check, offset, message in native_findings(value, self.allow) if native else ():
            self.findings.append((check, getattr(node, "lineno", 0) + offset, message))
        for stem in self.reference_stems:
            if re.search(rf"(^|[/\\]){re.escape(stem)}\.py\b", value):
                self.add(node, "reference-access", f"names the reference file `{stem}.py`")
        if whole and value in rules.FRAME_ATTRS and names.dunder.match(value):
            self.add(node, "introspection", f"names the function internal `{value}` in a string (an attribute "
                     "reached by name)")
