"""The views of a C++/CUDA text that the native static checks read, as the compiler would:

- `code_only`: comments and string/char literals blanked, line splices joined, digraphs and
  universal character names (`Py\\u0052un_String`) read as the characters they stand for.
- `with_literals`: the same with the string literals kept (section names, attribute names, `asm`
  text), index for index; `literals_read` reads their escapes and joins adjacent literals.
- `preprocessed`: the macros the text defines, expanded where they are used and `##` pasted, so
  `#define CAT(a, b) a##b` ... `CAT(PyRun_, String)` reads `PyRun_String`.

Newlines are kept, so an index in any view gives its line (within a few splices).
"""

from __future__ import annotations

import functools
import re

# Comments, string literals and char literals, in one pass (leftmost wins, so a `//` inside a
# string is not a comment). A char literal is one character or one escape: `1'000'000` (C++14
# digit separators) is code, not a literal.
NON_CODE = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\[^\'\n]{1,9}|[^\'\\\n])\'|//[^\n]*|/\*.*?\*/', re.S)
_UCN = re.compile(r"\\u([0-9a-fA-F]{4})|\\U([0-9a-fA-F]{8})")
_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{1,2})|\\([0-7]{1,3})")


def _blank(m: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", m.group(0))


def _ucn(m: re.Match[str]) -> str:
    char = chr(int(m.group(1) or m.group(2), 16))
    return char if char.isascii() and (char.isalnum() or char == "_") else m.group(0)


def _prepared(text: str) -> str:
    """Splices joined, digraphs `%:%:` and `%:` read as `##` and `#`, universal character names
    of identifier characters read as the characters."""
    return _UCN.sub(_ucn, text.replace("\\\n", "").replace("%:%:", "##").replace("%:", "#"))


def code_only(text: str) -> str:
    """`text` with comments and string/char literals blanked (newlines kept) and `\\`-newline
    splices joined at the end of their logical line, as the compiler reads it."""
    return NON_CODE.sub(_blank, _prepared(text))


def with_literals(text: str) -> str:
    """`code_only`'s view with the string and char literals kept (same length, same indices)."""
    return NON_CODE.sub(lambda m: _blank(m) if m.group(0).startswith(("//", "/*")) else m.group(0),
                        _prepared(text))


def literals_blanked(kept: str) -> str:
    """`with_literals`'s view (or one made from it) with its literals blanked again."""
    return NON_CODE.sub(_blank, kept)


def literals_read(kept: str) -> str:
    """`with_literals`'s view with escapes read (`"\\x5f_code__"`), adjacent literals joined
    (`"__co" "de__"`) and runs of char literals read as one word (`{'_', '_', 'c', ...}`).
    Indices differ from the other views: lines are counted in this one."""
    kept = _ESCAPE.sub(lambda e: chr(int(e.group(1), 16) if e.group(1) else int(e.group(2), 8)), kept)
    kept = re.sub(r'"\s*"', "", kept)
    return re.sub(r"(?:'\w'\s*,\s*)+'\w'", lambda m: "".join(re.findall(r"'(\w)'", m.group(0))), kept)


@functools.lru_cache(maxsize=16)
def _brackets(text: str) -> dict[int, int]:
    """Each opening bracket's index -> its closing bracket's (any kind closes any), in one pass."""
    match: dict[int, int] = {}
    stack: list[int] = []
    for m in re.finditer(r"[(\[{)\]}]", text):
        if m.group(0) in "([{":
            stack.append(m.start())
        elif stack:
            match[stack.pop()] = m.start()
    return match


def call_args(text: str, open_paren: int) -> tuple[list[str], int] | None:
    """The top-level arguments of the call whose `(` is at `open_paren`, and the index after its
    `)`; None when the parentheses do not close."""
    match = _brackets(text)
    close = match.get(open_paren)
    if close is None:
        return None
    args, start, i = [], open_paren + 1, open_paren + 1
    while i < close:
        if i in match:
            i = match[i] + 1
            continue
        if text[i] == ",":
            args.append(text[start:i])
            start = i + 1
        i += 1
    args.append(text[start:close])
    return ([] if len(args) == 1 and not args[0].strip() else [a.strip() for a in args]), close + 1


_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(\([^)\n]*\))?(.*)$", re.M)
_MAX_PASSES = 8


def preprocessed(text: str) -> str | None:
    """`text` (any view) with the macros it defines expanded at their uses, `#param` read as the
    argument and `##` pasted; None when it defines no macro. An over-approximation of the
    preprocessor (arguments are expanded before pasting too), bounded in passes and size."""
    macros: dict[str, tuple[list[str] | None, str]] = {}
    for m in _DEFINE.finditer(text):
        params = [p.strip() for p in m.group(2)[1:-1].split(",")] if m.group(2) else None
        macros[m.group(1)] = (params, m.group(3).strip())
    if not macros:
        return None
    names = re.compile(r"(?<!\w)(" + "|".join(map(re.escape, macros)) + r")\b")
    heads = {m.start(1) for m in _DEFINE.finditer(text)}
    out, limit = text, 4 * len(text) + 20000
    for _ in range(_MAX_PASSES):
        expanded = _expand_once(out, macros, names, heads)
        heads = {m.start(1) for m in _DEFINE.finditer(expanded)}
        if expanded == out or len(expanded) > limit:
            break
        out = expanded
    return re.sub(r"[ \t]*##[ \t]*", "", out)


def _expand_once(text: str, macros: dict[str, tuple[list[str] | None, str]], names: re.Pattern[str],
                 heads: set[int]) -> str:
    pieces, at = [], 0
    for m in names.finditer(text):
        if m.start() < at or m.start() in heads:
            continue
        params, body = macros[m.group(1)]
        end, args = m.end(), []
        if params is not None:
            paren = re.compile(r"\s*\(").match(text, m.end())
            parsed = call_args(text, paren.end() - 1) if paren else None
            if parsed is None:
                continue
            args, end = parsed
            body = _substitute(body, params, args)
        pieces += [text[at:m.start()], body, "\n" * text.count("\n", m.start(), end)]
        at = end
    return "".join(pieces) + text[at:]


def _substitute(body: str, params: list[str], args: list[str]) -> str:
    values = dict(zip(params, args, strict=False))  # `...` takes the rest
    if params and params[-1] == "...":
        values["__VA_ARGS__"] = ", ".join(args[len(params) - 1:])
    if not values:
        return body
    names = re.compile(r"(?:(?<!#)#(?!#)\s*)?\b(" + "|".join(map(re.escape, values)) + r")\b")
    return names.sub(lambda m: values[m.group(1)], body)


def defines(code: str, name: str) -> bool:
    """Whether `code` defines a function `name` with a body (or a lambda or macro of that name)."""
    return re.search(rf"[\w>*&]\s+[*&]*\s*{name}\s*\([^;{{}}]{{0,400}}\)\s*(?:const\b\s*)?(?:noexcept\b\s*)?"
                     rf"(?:->\s*[\w:<>]+\s*)?\{{|\b{name}\s*=\s*\[|#\s*define\s+{name}\b", code) is not None


def line_at(view: str, index: int) -> int:
    return view.count("\n", 0, index)
