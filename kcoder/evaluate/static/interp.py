"""Python reached from a candidate's C++/CUDA: the interpreter, its modules, objects' attributes
and code. Compiled code that can do this can rewrite any Python function of the harness (its
`__code__`) while keeping its identity, so the checks refuse every way in they can name:

- the Python C API (`PyObject_*`, `PyRun_*`, `PyImport_*`, `PyEval_*`, `PySys_*`, `_Py*`, the
  object structs and their slots: `PyFunctionObject`, `->tp_call`, `->func_code`, ...);
- pybind11 used to reach Python rather than to declare bindings: `module_::import`,
  `eval`/`exec`, `globals()`, `getattr`/`setattr`/`hasattr`/`delattr`, `reinterpret_borrow` and
  `reinterpret_steal`, `.attr(...)`, in the `py::` and `pybind11::` spellings, through
  namespace aliases, `using namespace pybind11;`, argument-dependent lookup (a bare
  `getattr(obj, "x")` finds pybind11's) and macros;
- the names of Python's code and namespace attributes (`__code__`, `__globals__`, `__dict__`,
  ...) anywhere in the C++ text, literals included.

Declaring bindings stays honest: `PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(...); }`,
`py::arg`, `py::call_guard<py::gil_scoped_release>()`, `py::object`/`py::tuple`/`py::cast` of
results, and `m.attr("NAME") = value;` on the module being defined.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from kcoder.evaluate.static.text import call_args, defines, line_at

CHECK = "python-from-cpp"
_API = "reaches the Python interpreter from C++ (the Python C API)"
_PYBIND = "reaches Python objects from C++ through pybind11 (imports, eval, attributes)"
_NAMES = "names Python's code or namespace attributes (the harness's functions can be rewritten)"

# The C API: every function family that reaches modules, code, frames, attributes or types, the
# object structs and their slots. GIL release (`PyEval_SaveThread`, Py_BEGIN_ALLOW_THREADS) and
# argument conversion (`PyLong_*`, `PyTuple_*`, `PyErr_*`) stay.
C_API = (r"\b(?:PyObject_\w+|PyRun_\w+|PyImport_\w+|PyEval_(?!SaveThread\b|RestoreThread\b|InitThreads\b)\w+|"
         r"Py_Compile\w*|PyCode_\w+|PyFunction_\w+|PyDict_(?:SetItem|DelItem|Update|Merge|SetDefault|Clear)\w*|"
         r"PySys_\w+|_Py\w+|PyModule_\w+|PyFrame_\w+|PyThreadState_\w+|PyInterpreterState_\w+|PyCFunction\w*|"
         r"PyMethodDef|PyMethod_\w+|PyInstanceMethod_\w+|PyCell_\w+|PyType_\w+|PyMarshal_\w+|PyUnstable_\w+|"
         r"PyAST_\w+|PyParser_\w+|PyDescr_\w+|PyMember_\w+|PyGen_\w+|PyCoro_\w+|Py_SET_\w+|"
         r"Py_(?:Initialize|Finalize|NewInterpreter|EndInterpreter|Main|RunMain|AtExit|Exit)\w*|"
         r"Py(?:Function|Code|Frame|Module|CFunction|Method|Type|Gen|Coro|Cell|Dict)Object|PyTypeObject|"
         r"Py_TYPE|Py_SET_TYPE|ml_meth|m_ml|md_dict|ob_type)\b")
# The slots of Python's objects, as C reaches them (`Py_TYPE(f)->tp_call`, `fn->func_code`).
SLOTS = (r"(?:->|\.)\s*(?:tp_(?:call|dict|getattro|setattro|getattr|setattr|new|init|vectorcall\w*|methods|members|"
         r"getset|descr_get|descr_set|base|bases|mro|flags|dealloc|as_\w+)|func_(?:code|globals|closure|defaults|"
         r"kwdefaults|dict|builtins|vectorcall|module)|co_(?:code|consts|names|code_adaptive|exceptiontable)|"
         r"f_(?:back|globals|locals|builtins|code|lasti|frame))\b")
_C_API = re.compile(C_API)
_SLOTS = re.compile(SLOTS)
# Python's attributes that hold code and namespaces: anywhere in the text, literals included.
DUNDERS = re.compile(r"(?<![A-Za-z0-9])__(?:code|globals|dict|builtins|closure|defaults|kwdefaults|self|"
                     r"subclasses|mro|bases|class|import|getattribute|setattr|delattr|loader|spec|wrapped)__"
                     r"(?![A-Za-z0-9])")

_PYBIND_ROOTS = ("pybind11", "py", "PYBIND11_NAMESPACE")
# Reached through a pybind11 qualifier (`py::`, `pybind11::`, an alias of them).
_QUALIFIED = (r"eval\w*|exec|globals|builtins|getattr|setattr|hasattr|delattr|reinterpret_borrow|reinterpret_steal|"
              r"module_?\s*::\s*import|detail\s*::\s*(?:\w*attr\w*|get_internals|get_local_internals)")
# Static members and member pointers that only pybind11 has: any qualifier will do.
_MEMBERS = re.compile(r"(?:::|\.|->)\s*import\s*\(|::\s*attr\b")
# Found by argument-dependent lookup: an unqualified call on a pybind11 object reaches them.
_ADL = re.compile(r"(?<![\w.>:])(?:getattr|setattr|hasattr|delattr|reinterpret_borrow|reinterpret_steal)\s*[<(]")
# Free functions that need `using namespace pybind11;` or a pybind11 string argument.
_FREE = re.compile(r"(?<![\w.>:])(eval|exec|eval_file|globals|builtins)\s*[<(]")
_ATTR = re.compile(r"(?:\.|->)\s*attr\s*\(")
_MODULE_CONSTANT = re.compile(r'(?:\.|->)\s*attr\s*\(\s*"[A-Za-z_]\w*"\s*\)\s*=(?!=)')
_BINDINGS = re.compile(r"\bPYBIND11_MODULE\s*\(\s*\w+\s*,\s*(\w+)\s*\)\s*\{")


def _roots(code: str) -> set[str]:
    """pybind11's names in `code`: its own, and the namespace aliases made of them."""
    roots = set(_PYBIND_ROOTS)
    aliases = re.findall(r"\bnamespace\s+(\w+)\s*=\s*(?:::\s*)?(\w+)\s*;", code)
    for _ in range(8):  # aliases of aliases
        more = {alias for alias, target in aliases if target in roots} - roots
        if not more:
            break
        roots |= more
    return roots


def _module_constants(code: str, kept: str) -> set[int]:
    """Where `m.attr("NAME") = value` sets a constant on the module PYBIND11_MODULE defines."""
    allowed: set[int] = set()
    for head in _BINDINGS.finditer(code):
        module, body = head.group(1), call_args(code, head.end() - 1)
        end = body[1] if body else len(code)
        for m in _ATTR.finditer(code, head.end(), end):
            before = re.search(r"(\w+)\s*$", code[max(0, m.start() - 80):m.start()])
            if before and before.group(1) == module and _MODULE_CONSTANT.match(kept, m.start()):
                allowed.add(m.start())
    return allowed


def _shown(m: re.Match[str]) -> str:
    return re.sub(r"\s+", " ", m.group(0).strip(" ([<"))


def interpreter_findings(code: str, kept: str, read: str, cpp_like: bool) -> Iterator[tuple[int, str]]:
    """(line, message) for each way into Python in one C++ string: `code` blanks its literals,
    `kept` keeps them index for index, `read` has their escapes read (text.py's views);
    `cpp_like`: the text reads as C/C++, not as prose or Python (which share some names)."""
    m = _C_API.search(code)
    if m:
        yield line_at(code, m.start()), f"{_API} (`{_shown(m)}`)"
    roots = _roots(code)
    names = "|".join(sorted(map(re.escape, roots)))
    m = re.search(rf"(?<![\w])(?:{names})\s*::\s*(?:{_QUALIFIED})\b", code) or _MEMBERS.search(code)
    if m:
        yield line_at(code, m.start()), f"{_PYBIND} (`{_shown(m)}`)"
    if not cpp_like:  # the names below are Python's too: only in text that reads as C/C++
        return
    m = _SLOTS.search(code)
    if m:
        yield line_at(code, m.start()), f"{_API} (`{_shown(m)}`)"
    m = DUNDERS.search(read)
    if m:
        yield line_at(read, m.start()), f"{_NAMES} (`{m.group(0)}`)"
    m = _ADL.search(code)
    if m:
        yield line_at(code, m.start()), f"{_PYBIND} (`{_shown(m)}`)"
    every = re.search(rf"\busing\s+namespace\s+(?:::\s*)?(?:{names})\s*;|\bnamespace\s+(?:{names})\s*\{{", code)
    strings = re.search(rf"(?<![\w])(?:{names})\s*::\s*(?:str|object|handle|bytes|bytearray|dict|function|"
                        r"cpp_function|cast|list|tuple|capsule|make_tuple|args|kwargs|iterable|sequence|type)\b", code)
    own: dict[str, bool] = {}  # a function of the kernel's own, called where no pybind11 string can be its argument
    for m in _FREE.finditer(code):
        name = m.group(1)
        if name not in own:
            own[name] = defines(code, name) and not (strings and name in ("eval", "exec", "eval_file"))
        if every or not own[name]:
            yield line_at(code, m.start()), f"{_PYBIND} (`{_shown(m)}`)"
            break
    allowed = _module_constants(code, kept)
    for m in _ATTR.finditer(code):
        if m.start() not in allowed:
            yield line_at(code, m.start()), f"{_PYBIND} (`{_shown(m)}`)"
            break
