"""The tables the Python static checks read: what is refused, and where only some uses are.

Three kinds of module:
- DENY_IMPORTS: every use is a trick, so the import is refused (threads and processes, native
  code outside the extension, sockets, object serialisers that carry results between calls,
  torch's compiler and mode machinery).
- DENY_REFS: modules with honest uses; only the names listed are refused (`inspect.stack`,
  `sys._getframe`, `os.fork`, ...), wherever they are reached (called or not).
- ALLOW_ONLY: modules whose honest uses are few: only the listed names pass (`importlib`'s
  find_spec and import_module of a named module, `gc.collect`, `shutil.which`).
"""

from __future__ import annotations

import ast

_THREAD = ("thread", "starts threads")
_PROCESS = ("process", "starts, signals or detaches processes")
_FILES = ("file-io", "reads or writes files or descriptors")
_CARRIER = ("file-io", "serialises or stores objects (can carry outputs between calls)")
_NETWORK = ("network", "opens network connections")

DENY_IMPORTS: dict[str, tuple[str, str]] = {
    "threading": _THREAD, "_thread": _THREAD, "concurrent": ("thread", "starts threads or processes"),
    "asyncio": ("thread", "runs work asynchronously"),
    "multiprocessing": _PROCESS, "subprocess": _PROCESS, "pty": _PROCESS, "signal": _PROCESS,
    "atexit": ("process", "runs code when the process exits"),
    "ctypes": ("ctypes", "uses ctypes to reach native code outside the extension"),
    "_ctypes": ("ctypes", "uses ctypes"), "cffi": ("ctypes", "uses cffi to reach native code outside the extension"),
    "builtins": ("monkeypatch", "imports builtins"),
    "pickle": _CARRIER, "_pickle": _CARRIER, "cPickle": _CARRIER, "dill": _CARRIER, "cloudpickle": _CARRIER,
    "copyreg": _CARRIER, "shelve": _CARRIER, "marshal": _CARRIER, "joblib": _CARRIER, "dbm": _CARRIER,
    "sqlite3": _CARRIER,
    "tempfile": ("file-io", "uses temporary files"), "mmap": ("file-io", "maps files"),
    "fcntl": _FILES, "fileinput": _FILES, "glob": _FILES, "linecache": _FILES, "zipfile": _FILES,
    "tarfile": _FILES,
    "socket": _NETWORK, "ssl": _NETWORK, "http": _NETWORK, "urllib": _NETWORK, "requests": _NETWORK,
    "httpx": _NETWORK, "ftplib": _NETWORK, "smtplib": _NETWORK, "xmlrpc": _NETWORK, "selectors": _NETWORK,
    "select": _NETWORK,
    "code": ("dynamic-code", "runs code from strings"), "codeop": ("dynamic-code", "compiles code from strings"),
    "runpy": ("dynamic-code", "runs modules or files"), "site": ("dynamic-code", "changes the import system"),
    "pkgutil": ("dynamic-code", "loads modules or package data"),
    "kcoder": ("harness", "imports the kcoder harness"),
    "torch._dynamo": ("torch-compiler", "uses torch's compiler instead of its own kernels"),
    "torch._inductor": ("torch-compiler", "uses torch's compiler instead of its own kernels"),
    "torch.compiler": ("torch-compiler", "uses torch's compiler instead of its own kernels"),
    "torch.export": ("torch-compiler", "uses torch.export"),
    "torch.fx": ("torch-compiler", "uses torch.fx"),
    "torch.jit": ("torch-compiler", "uses TorchScript"),
    "torch.overrides": ("guard-evasion", "imports torch.overrides (the guard's machinery)"),
    "torch.utils._python_dispatch": ("guard-evasion", "imports the dispatcher-mode machinery"),
    "torch._subclasses": ("guard-evasion", "uses fake or functional tensors"),
    "torch.library": ("guard-evasion", "registers kernels through torch.library"),
    "torch._C": ("guard-evasion", "reaches into torch._C internals"),
    "torch.multiprocessing": _PROCESS, "torch.distributed": _PROCESS,
    "torch.hub": ("network", "downloads code or weights"),
}

_FRAMES = ("introspection", "walks stack frames")
_OS_FILE = ("open", "read", "write", "fdopen", "pipe", "pipe2", "mkfifo", "mknod", "remove", "unlink", "rename",
            "renames", "replace", "makedirs", "mkdir", "rmdir", "removedirs", "listdir", "scandir", "walk", "fwalk",
            "symlink", "link", "readlink", "chmod", "fchmod", "lchmod", "chown", "fchown", "lchown", "truncate",
            "ftruncate", "dup", "dup2", "close", "closerange", "lseek", "pread", "pwrite", "sendfile", "splice",
            "copy_file_range", "memfd_create", "utime", "chdir", "fchdir", "chroot", "set_inheritable",
            "set_blocking", "setxattr", "removexattr", "posix_fallocate", "mkstemp", "openpty")
_OS_PROC = ("system", "popen", "fork", "forkpty", "kill", "killpg", "_exit", "abort", "setsid", "setpgid", "setpgrp",
            "wait", "waitpid", "wait3", "wait4", "waitid", "register_at_fork", "posix_spawn", "posix_spawnp",
            "execl", "execle", "execlp", "execlpe", "execv", "execve", "execvp", "execvpe", "spawnl", "spawnle",
            "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "startfile", "pidfd_open",
            "nice", "setpriority", "sched_setaffinity", "sched_setscheduler", "sched_setparam", "putenv", "unsetenv",
            "setuid", "setgid", "seteuid", "setegid", "setresuid", "setresgid", "plock")

DENY_REFS: dict[str, tuple[str, str]] = {
    **{f"inspect.{name}": _FRAMES for name in (
        "currentframe", "stack", "trace", "getouterframes", "getinnerframes", "getframeinfo", "getlineno",
        "getgeneratorlocals", "getcoroutinelocals", "getasyncgenlocals", "getclosurevars", "FrameInfo",
        "Traceback", "getmodule")},
    **{f"inspect.{name}": ("file-io", "reads source files") for name in (
        "getsource", "getsourcelines", "getsourcefile", "getfile", "findsource", "getcomments")},
    "sys._getframe": _FRAMES, "sys._getframemodulename": _FRAMES, "sys._current_frames": _FRAMES,
    "sys._current_exceptions": _FRAMES, "sys.exc_info": _FRAMES, "sys.exception": _FRAMES,
    "sys.last_traceback": _FRAMES, "sys.settrace": ("introspection", "installs a tracer"),
    "sys.setprofile": ("introspection", "installs a profiler hook"),
    "sys.monitoring": ("introspection", "installs monitoring hooks"),
    "sys.addaudithook": ("introspection", "installs an audit hook"),
    "sys.remote_exec": ("dynamic-code", "runs code in another process"),
    "sys.setdlopenflags": ("symbol-hijack", "changes how native libraries are loaded (symbol interposition)"),
    "sys.modules": ("monkeypatch", "touches sys.modules"),
    "sys.meta_path": ("monkeypatch", "changes the import system"),
    "sys.path_hooks": ("monkeypatch", "changes the import system"),
    "sys.argv": ("harness", "reads the harness's command line"),
    "sys.orig_argv": ("harness", "reads the harness's command line"),
    **{f"os.{name}": ("file-io", "does file or descriptor I/O") for name in _OS_FILE},
    **{f"os.{name}": _PROCESS for name in _OS_PROC},
    "os.environ.copy": ("secrets", "copies the environment"),
    "io.open": _FILES, "io.FileIO": _FILES, "io.open_code": _FILES, "codecs.open": _FILES,
    "tokenize.open": _FILES, "numpy.save": _FILES, "numpy.savez": _FILES, "numpy.load": _FILES,
    "numpy.fromfile": _FILES, "numpy.memmap": _FILES, "numpy.lib.format": _FILES,
    "torch.save": ("file-io", "writes tensors to disk"), "torch.load": ("file-io", "reads tensors from disk"),
    "torch.utils.cpp_extension.load": ("not-self-contained", "builds from files on disk; use load_inline"),
    "torch.ops.load_library": ("not-self-contained", "loads a native library from disk"),
    "torch.classes.load_library": ("not-self-contained", "loads a native library from disk"),
    "functools.lru_cache": ("state", "memoises results"), "functools.cache": ("state", "memoises results"),
    "torch.compile": ("torch-compiler", "uses torch.compile instead of its own kernels"),
    "torch.cuda.Stream": ("stream", "creates a CUDA stream"),
    "torch.cuda.stream": ("stream", "switches CUDA streams"),
    "torch.cuda.Event": ("stream", "creates CUDA events"),
    "torch.cuda.set_stream": ("stream", "switches CUDA streams"),
    "torch.cuda.ExternalStream": ("stream", "wraps an external CUDA stream"),
    "torch.cuda.graph": ("stream", "captures CUDA graphs"),
    "torch.cuda.CUDAGraph": ("stream", "captures CUDA graphs"),
    "torch.cuda.make_graphed_callables": ("stream", "captures CUDA graphs"),
    "torch.Stream": ("stream", "creates a stream"),
    "torch.Event": ("stream", "creates events"),
    "torch.set_num_threads": ("thread", "changes torch's thread count"),
    "torch.set_num_interop_threads": ("thread", "changes torch's thread count"),
    "torch.set_float32_matmul_precision": ("precision", "changes the matmul precision"),
    "torch.use_deterministic_algorithms": ("precision", "changes torch's global modes"),
    "torch.set_default_dtype": ("precision", "changes the default dtype"),
    "torch.set_flush_denormal": ("precision", "changes denormal handling"),
}

# A module with few honest uses: (allowed names, check, message for anything else).
ALLOW_ONLY: dict[str, tuple[set[str], str, str]] = {
    "importlib": ({"importlib.util.find_spec", "importlib.import_module", "importlib.metadata",
                   "importlib.invalidate_caches"}, "dynamic-code", "loads, reloads or executes modules"),
    "gc": ({"gc.collect", "gc.isenabled", "gc.get_count", "gc.get_threshold", "gc.get_stats", "gc.is_tracked"},
           "introspection", "hunts objects or changes the garbage collector"),
    "shutil": ({"shutil.which", "shutil.disk_usage", "shutil.get_terminal_size"}, "file-io", "manipulates files"),
}

# Modules whose value must not travel (`m = inspect; m.stack()` would escape the name checks).
SENSITIVE_MODULES = {"os", "sys", "inspect", "gc", "importlib", "importlib.util", "shutil", "io", "builtins",
                     "torch._C", "functools", "time"}

DENY_BUILTINS: dict[str, tuple[str, str]] = {
    "open": ("file-io", "opens a file"),
    "eval": ("dynamic-code", "evaluates code at run time"),
    "exec": ("dynamic-code", "executes code at run time"),
    "compile": ("dynamic-code", "compiles code at run time"),
    "__import__": ("dynamic-code", "imports by name at run time"),
    "breakpoint": ("dynamic-code", "enters a debugger"),
    "globals": ("state", "uses globals()"),
    "vars": ("introspection", "uses vars()"),
    "locals": ("introspection", "uses locals()"),
    "setattr": ("monkeypatch", "uses setattr on something other than self"),
    "delattr": ("monkeypatch", "uses delattr"),
    "__builtins__": ("introspection", "reaches __builtins__"),
    "__loader__": ("file-io", "reaches the module loader (it reads files)"),
}

# Build variables a candidate may read (os.environ.get / getenv / [..] / in), and may set.
ENV_READ = {"TORCH_CUDA_ARCH_LIST", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "MAX_JOBS", "CXX", "CC",
            "OMP_NUM_THREADS", "TORCH_EXTENSIONS_DIR"}
ENV_WRITE = {"TORCH_CUDA_ARCH_LIST", "MAX_JOBS"}

FRAME_ATTRS = {"f_back", "f_locals", "f_globals", "f_builtins", "f_code", "gi_frame", "cr_frame", "ag_frame",
               "tb_frame", "tb_next", "__globals__", "__closure__", "__code__", "__subclasses__", "__builtins__",
               "_current_frames", "__traceback__", "__wrapped__"}  # __wrapped__: torch's own load_inline under kcoder's
EVASION_ATTRS = {"_is_torch_function_mode_enabled", "_get_current_dispatch_mode",
                 "_get_current_function_mode", "_len_torch_function_stack",
                 "DisableTorchFunction", "DisableTorchFunctionSubclass",
                 "_DisableTorchDispatch", "_disabled_torch_function_impl",
                 "TorchFunctionMode", "TorchDispatchMode", "_pop_mode", "_push_mode"}
# Methods that read or write files on whatever object has them (pathlib, numpy, torch storages).
FILE_ATTRS = {"write_text", "write_bytes", "read_text", "read_bytes", "touch", "unlink", "mkdir", "rmdir",
              "symlink_to", "hardlink_to", "iterdir", "rglob", "tofile", "from_file", "fromfile", "chmod", "lchmod"}
# Loader and spec methods: they run or read a module's file (`find_spec(m).loader.exec_module`).
LOADER_ATTRS = {"exec_module", "load_module", "get_data", "get_source", "get_code", "get_filename",
                "module_from_spec", "spec_from_file_location", "spec_from_loader", "SourceFileLoader"}
# Methods that touch files only on a path object (`str.replace`, `Tensor.rename` are honest).
PATH_METHODS = {"open", "replace", "rename", "glob", "walk", "link_to"}
PATH_TYPES = {"pathlib.Path", "pathlib.PosixPath", "pathlib.PurePath", "pathlib.PurePosixPath", "pathlib.WindowsPath"}
MEMOISERS = {"functools.lru_cache", "functools.cache"}
PATCHABLE_ROOTS = {"torch", "time", "sys", "os", "builtins", "math", "numpy", "np", "nn", "F",
                   "functools", "timeit", "kcoder", "triton"}
_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError"}


def allowed_path(path: str, importing: bool = False) -> bool:
    """Whether `path` is at or below a name ALLOW_ONLY lets through (or, for an import, on the
    way to one: `import importlib.util` for `importlib.util.find_spec`)."""
    allowed = ALLOW_ONLY[path.split(".")[0]][0]
    return any(path == a or path.startswith(a + ".") or (importing and a.startswith(path + "."))
               for a in allowed)


def optional_import(node: ast.Try) -> bool:
    """`try: import x` / `except ImportError: x = None` at module level: an optional dependency,
    not a fallback. Only imports and plain assignments in the body and handlers, only import
    errors caught, no else or finally."""
    simple = (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.Pass)
    if node.orelse or node.finalbody or not node.handlers:
        return False
    if not all(isinstance(stmt, simple) for stmt in node.body):
        return False
    for handler in node.handlers:
        caught = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if not caught or not all(isinstance(c, ast.Name) and c.id in _IMPORT_ERRORS for c in caught):
            return False
        if not all(isinstance(stmt, simple) for stmt in handler.body):
            return False
    values = [stmt.value for stmt in node.body + [s for h in node.handlers for s in h.body]
              if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None]
    return not any(isinstance(n, (ast.Call, ast.Lambda)) for value in values for n in ast.walk(value))


# Module names checked where a chain reaches them through another module's attribute
# (`torch.utils.cpp_extension.os.fork`): every module the tables above name, except torch's.
MODULE_ROOTS = ({name.split(".")[0] for name in [*DENY_IMPORTS, *DENY_REFS, *ALLOW_ONLY, *SENSITIVE_MODULES]}
                - {"torch", "numpy", "functools", "time"})
