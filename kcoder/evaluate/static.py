"""Static checks on a candidate's source before it runs. Each finding names its trick.

Python is checked on the AST; the C++/CUDA sources (every string constant in the file) by
patterns with comments stripped. These checks are a first line; the run-time guard and the
dynamic checks in verify/timing back them up.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    check: str  # short id, e.g. "stream", "thread", "monkeypatch"
    line: int
    message: str

    def describe(self, filename: str) -> str:
        return f"static check [{self.check}]: {self.message} ({filename}:{self.line})"


_DENY_IMPORTS = {
    "threading": ("thread", "starts threads"),
    "_thread": ("thread", "starts threads"),
    "multiprocessing": ("thread", "starts processes"),
    "concurrent": ("thread", "starts threads or processes"),
    "asyncio": ("thread", "runs work asynchronously"),
    "subprocess": ("thread", "starts processes"),
    "ctypes": ("ctypes", "uses ctypes to reach native code outside the extension"),
    "_ctypes": ("ctypes", "uses ctypes"),
    "cffi": ("ctypes", "uses cffi to reach native code outside the extension"),
    "inspect": ("introspection", "imports inspect (frame walking)"),
    "gc": ("introspection", "imports gc (object hunting)"),
    "importlib": ("monkeypatch", "imports importlib"),
    "builtins": ("monkeypatch", "imports builtins"),
    "pickle": ("file-io", "serialises objects (can carry outputs between calls)"),
    "shelve": ("file-io", "stores objects on disk"),
    "marshal": ("file-io", "serialises objects"),
    "tempfile": ("file-io", "uses temporary files"),
    "mmap": ("file-io", "maps files"),
    "shutil": ("file-io", "manipulates files"),
    "socket": ("file-io", "opens sockets"),
    "kcoder": ("harness", "imports the kcoder harness"),
    "torch._dynamo": ("torch-compiler", "uses torch's compiler instead of its own kernels"),
    "torch._inductor": ("torch-compiler", "uses torch's compiler instead of its own kernels"),
    "torch.fx": ("torch-compiler", "uses torch.fx"),
    "torch.jit": ("torch-compiler", "uses TorchScript"),
    "torch.overrides": ("guard-evasion", "imports torch.overrides (the guard's machinery)"),
    "torch.utils._python_dispatch": ("guard-evasion", "imports the dispatcher-mode machinery"),
    "torch.library": ("guard-evasion", "registers kernels through torch.library"),
    "torch._C": ("guard-evasion", "reaches into torch._C internals"),
}

_DENY_CALLS = {
    "open": ("file-io", "opens a file"),
    "eval": ("dynamic-code", "evaluates code at run time"),
    "exec": ("dynamic-code", "executes code at run time"),
    "compile": ("dynamic-code", "compiles code at run time"),
    "__import__": ("dynamic-code", "imports by name at run time"),
    "globals": ("state", "uses globals()"),
    "vars": ("introspection", "uses vars()"),
    "locals": ("introspection", "uses locals()"),
    "setattr": ("monkeypatch", "uses setattr"),
    "delattr": ("monkeypatch", "uses delattr"),
    "torch.compile": ("torch-compiler", "uses torch.compile instead of its own kernels"),
    "torch.cuda.Stream": ("stream", "creates a CUDA stream"),
    "torch.cuda.stream": ("stream", "switches CUDA streams"),
    "torch.cuda.Event": ("stream", "creates CUDA events"),
    "torch.cuda.set_stream": ("stream", "switches CUDA streams"),
    "torch.cuda.ExternalStream": ("stream", "wraps an external CUDA stream"),
    "torch.cuda.graph": ("stream", "captures CUDA graphs"),
    "torch.cuda.CUDAGraph": ("stream", "captures CUDA graphs"),
    "torch.Stream": ("stream", "creates a stream"),
    "torch.Event": ("stream", "creates events"),
    "torch.set_num_threads": ("thread", "changes torch's thread count"),
    "torch.set_num_interop_threads": ("thread", "changes torch's thread count"),
    "torch.set_float32_matmul_precision": ("precision", "changes the matmul precision"),
    "torch.use_deterministic_algorithms": ("precision", "changes torch's global modes"),
    "torch.set_default_dtype": ("precision", "changes the default dtype"),
    "torch.set_flush_denormal": ("precision", "changes denormal handling"),
    "torch.save": ("file-io", "writes tensors to disk"),
    "torch.load": ("file-io", "reads tensors from disk"),
    "torch.utils.cpp_extension.load": ("not-self-contained", "builds from files on disk; use load_inline"),
    "functools.lru_cache": ("state", "memoises results"),
    "functools.cache": ("state", "memoises results"),
    "lru_cache": ("state", "memoises results"),
    "cache": ("state", "memoises results"),
    "sys._getframe": ("introspection", "walks stack frames"),
    "sys.settrace": ("introspection", "installs a tracer"),
    "sys.setprofile": ("introspection", "installs a profiler hook"),
}

_OS_FILE = {"open", "read", "write", "fdopen", "pipe", "mkfifo", "remove", "unlink", "rename",
            "replace", "makedirs", "mkdir", "listdir", "scandir", "walk"}
_OS_PROC = {"system", "popen", "fork", "forkpty", "kill", "killpg", "_exit", "spawnl", "spawnv",
            "execv", "execl", "execve", "execvp", "posix_spawn"}
_FRAME_ATTRS = {"f_back", "f_locals", "f_globals", "f_code", "gi_frame", "tb_frame",
                "__globals__", "__closure__", "__code__", "__subclasses__", "__builtins__",
                "_current_frames"}
_EVASION_ATTRS = {"_is_torch_function_mode_enabled", "_get_current_dispatch_mode",
                  "_get_current_function_mode", "_len_torch_function_stack",
                  "DisableTorchFunction", "DisableTorchFunctionSubclass",
                  "_DisableTorchDispatch", "_disabled_torch_function_impl",
                  "TorchFunctionMode", "TorchDispatchMode", "_pop_mode", "_push_mode"}
_PATCHABLE_ROOTS = {"torch", "time", "sys", "os", "builtins", "math", "numpy", "np", "nn", "F",
                    "functools", "timeit", "kcoder", "triton"}

# C++/CUDA patterns, checked on every string constant (comments stripped).
_CPP_PATTERNS = [
    (r"cudaStreamCreate|getStreamFromPool|getStreamFromExternal|setCurrentCUDAStream|"
     r"CUDAStreamGuard|cudaStreamBeginCapture|cudaGraphLaunch|cudaLaunchHostFunc|"
     r"cudaStreamPerThread|cudaEventCreate", "stream",
     "creates or switches CUDA streams/graphs/events (work off the current stream escapes the timer)"),
    (r"std::thread|std::jthread|pthread_create|std::async|\bfork\s*\(", "thread",
     "starts native threads"),
    (r"\bcublas|\bcublasLt|at::cuda::blas|cblas_|\bmkl_|\bdnnl", "library-gemm",
     "calls a BLAS library directly"),
    (r"\bcudnn", "library-conv", "calls cuDNN directly"),
    (r"at::native::|at::cpu::|at::cuda::(?!getCurrentCUDAStream|CUDAGuard|OptionalCUDAGuard|"
     r"getCurrentDeviceProperties|getDeviceProperties|current_device|CUDAStream\b)[a-z_]+\s*\(|"
     r"at::_ops::|c10::Dispatcher|TORCH_LIBRARY_IMPL\s*\(\s*aten", "guard-evasion",
     "calls ATen kernels directly, bypassing the dispatcher"),
    (r"\bfopen\s*\(|std::[io]?fstream|\bifstream\b|\bofstream\b|\bmmap\s*\(|\bdlopen\s*\(|"
     r"\bdlsym\s*\(|\bsystem\s*\(|\bpopen\s*\(", "file-io", "does file, process or library I/O"),
    (r"py::module_?::import|PyImport_|PyRun_|py::exec|py::eval", "python-from-cpp",
     "calls back into Python from C++"),
    # A static *variable* holding tensors (a static function returning one is fine).
    (r"\bstatic\s+(?:const\s+)?(?:torch|at)::Tensor\s*&?\s*\w+\s*(?:;|=|\{|\[)|"
     r"\bstatic\s+std::\w+\s*<[^;(){}]*(?:torch|at)::Tensor[^;(){}]*>\s*\w+\s*(?:;|=|\{)", "state",
     "keeps tensors in static storage (can carry outputs between calls)"),
]
_CPP_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


class _Checker(ast.NodeVisitor):
    def __init__(self, allow: list[str], reference_stems: set[str]) -> None:
        self.allow = allow
        self.reference_stems = reference_stems
        self.aliases: dict[str, str] = {}  # local name -> module path
        self.findings: list[Finding] = []

    def add(self, node: ast.AST, check: str, message: str) -> None:
        self.findings.append(Finding(check, getattr(node, "lineno", 0), message))

    def resolve(self, dotted: str) -> str:
        head, _, rest = dotted.partition(".")
        base = self.aliases.get(head, head)
        return f"{base}.{rest}" if rest else base

    def _check_module(self, node: ast.AST, module: str) -> None:
        root = module.split(".")[0]
        if root in self.reference_stems or module == "__main__":
            self.add(node, "reference-access", f"imports the reference problem `{module}`")
        for denied, (check, message) in _DENY_IMPORTS.items():
            if module == denied or module.startswith(denied + "."):
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
            self._check_module(node, full)
            self.aliases[alias.asname or alias.name] = full
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = self.resolve(_dotted(node.func)) if _dotted(node.func) else ""
        for key in (name, name.rsplit(".", 1)[-1] if name.count(".") == 0 else None):
            if key and key in _DENY_CALLS:
                check, message = _DENY_CALLS[key]
                self.add(node, check, f"{message} (`{name}(...)`)")
        if name.startswith("os."):
            attr = name.split(".", 1)[1]
            if attr in _OS_FILE:
                self.add(node, "file-io", f"does file I/O (`{name}`)")
            if attr in _OS_PROC:
                self.add(node, "thread", f"starts or signals processes (`{name}`)")
        if name in ("numpy.save", "numpy.load", "numpy.fromfile") or name.endswith(".tofile"):
            self.add(node, "file-io", f"does file I/O (`{name}`)")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in _FRAME_ATTRS:
            self.add(node, "introspection", f"walks frames or function internals (`.{node.attr}`)")
        if node.attr in _EVASION_ATTRS:
            self.add(node, "guard-evasion", f"inspects or disables torch's modes (`.{node.attr}`)")
        dotted = self.resolve(_dotted(node))
        if dotted == "sys.modules":
            self.add(node, "monkeypatch", "touches sys.modules")
        if dotted.startswith("torch._C") or dotted.startswith("torch._dynamo"):
            self.add(node, "guard-evasion", f"reaches into torch internals (`{dotted}`)")
        self.generic_visit(node)

    def _check_target(self, target: ast.AST) -> None:
        node = target.value if isinstance(target, ast.Subscript) else target
        dotted = _dotted(node) if isinstance(node, ast.Attribute) else ""
        if dotted:
            root = dotted.split(".")[0]
            module = self.resolve(dotted)
            if root in self.aliases or root in _PATCHABLE_ROOTS:
                check = "precision" if "allow_tf32" in dotted or "backends" in module else "monkeypatch"
                self.add(target, check, f"assigns to `{module}` (patching a module, timer or setting)")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_target(target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        self.add(node, "state", f"declares global {', '.join(node.names)} (state between calls)")

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.add(node, "state", f"declares nonlocal {', '.join(node.names)} (state between calls)")

    def visit_Try(self, node: ast.Try) -> None:
        self.add(node, "fallback", "uses try/except (a handler can hide a torch fallback or detect the guard)")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            name = self.resolve(_dotted(item.context_expr.func)) if isinstance(
                item.context_expr, ast.Call) and _dotted(item.context_expr.func) else ""
            if name.endswith("suppress"):
                self.add(node, "fallback", "suppresses exceptions (contextlib.suppress)")
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            if self.resolve(_dotted(base)) in ("torch.Tensor", "torch._tensor.Tensor"):
                self.add(node, "tensor-subclass", f"class {node.name} subclasses torch.Tensor (lazy/fake outputs)")
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name in ("__torch_function__", "__torch_dispatch__"):
                self.add(item, "tensor-subclass", f"defines {item.name} (intercepts torch calls)")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self._check_cpp(node, node.value)
            for stem in self.reference_stems:
                if re.search(rf"(^|[/\\]){re.escape(stem)}\.py\b", node.value):
                    self.add(node, "reference-access", f"names the reference file `{stem}.py`")

    def _check_cpp(self, node: ast.AST, text: str) -> None:
        code = _CPP_COMMENTS.sub("", text)
        for pattern, check, message in _CPP_PATTERNS:
            if check == "library-gemm" and "gemm" in self.allow:
                continue
            if check == "library-conv" and "conv" in self.allow:
                continue
            m = re.search(pattern, code)
            if m:
                line = getattr(node, "lineno", 0) + code[: m.start()].count("\n")
                self.findings.append(Finding(check, line, f"C++/CUDA source {message} (`{m.group(0).strip()}`)"))


def check_source(source: str, *, allow: list[str] | None = None,
                 reference_stems: set[str] | None = None) -> list[Finding]:
    """Return every static finding for a candidate's source, in line order."""
    tree = ast.parse(source)
    checker = _Checker(list(allow or []), set(reference_stems or ()))
    checker.visit(tree)
    unique = {(f.check, f.line, f.message): f for f in checker.findings}
    return sorted(unique.values(), key=lambda f: f.line)
