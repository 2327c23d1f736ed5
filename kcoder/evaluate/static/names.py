"""Names and small readers the Python static checks (python.py) share: which dunders a kernel
file may name by string, the calls that reach an attribute by name, and dotted names."""

from __future__ import annotations

import ast
import re

dunder = re.compile(r"^__\w+__$")
# Dunders a kernel file may name in getattr/hasattr: descriptive, or protocols; none reaches code,
# frames, globals or a class's machinery.
HARMLESS_DUNDERS = frozenset({"__name__", "__qualname__", "__doc__", "__module__", "__version__", "__len__",
                              "__iter__", "__getitem__", "__contains__", "__annotations__", "__array__"})
# Calls that reach an attribute by a name given as a string: the name is judged as `.name` is.
by_name = {"getattr": 1, "hasattr": 1, "setattr": 1, "delattr": 1, "inspect.getattr_static": 1}
by_name_methods = {"__getattribute__", "__getattr__", "__setattr__", "__delattr__"}
FOLD_BUDGET = 1 << 18  # check_source adds four times the file's length
# Foldable expressions whose string is checked whole (a Name is checked where it is bound).
folded = (ast.BinOp, ast.JoinedStr, ast.Call, ast.Subscript)


def dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def const_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
