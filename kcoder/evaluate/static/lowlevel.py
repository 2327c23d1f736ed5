"""Native tricks below the kernel: code that runs when the library loads, allocators and storages
made by hand (outputs that compute themselves when first read), page protection and signal
handlers (the same, through faults), and symbols looked up by name (interposing torch's or
CUDA's functions).

Honest kernels keep: global objects with constructors, `__attribute__((always_inline))`,
workspace from `c10::cuda::CUDACachingAllocator::raw_alloc`/`raw_delete` or from an allocator
torch hands out (`allocate(n)`), `at::from_blob` with a deleter, the driver's TMA encoder taken
by name (`cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", ...)`), and identifiers such as
`signal_strength` or a one-argument `signal(x)` of their own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from kcoder.evaluate.static.text import call_args, line_at

_LOAD = ("load-time-code", "runs code when the library loads or unloads")
_ALLOC = ("allocator", "replaces an allocator or builds storages by hand (outputs that compute themselves "
                       "when read)")
_PAGES = ("page-protection", "protects, maps or traps memory pages (outputs that compute themselves when read)")
_SIGNALS = ("signal", "handles signals or jumps across frames (faults turned into work)")
_SYMBOLS = ("symbol-hijack", "looks up or patches native symbols by name (dlsym, the GOT, driver entry points)")

_SIGNAL_NAMES = (r"SIG(?:SEGV|BUS|ILL|FPE|TRAP|ALRM|VTALRM|PROF|USR1|USR2|IO|POLL|URG|SYS|XCPU|XFSZ|WINCH|PIPE|"
                 r"CHLD|CONT|STOP|TSTP|TTIN|TTOU|HUP|INT|QUIT|ABRT|TERM|KILL|STKFLT|PWR|RTMIN|RTMAX)")
_ALLOCATOR_OK = (r"raw_alloc|raw_alloc_with_stream|raw_delete|get|getDeviceStats|resetPeakStats|"
                 r"resetAccumulatedStats|emptyCache|recordStream")

# (pattern, (check, message)) on the code with literals blanked, in every string of the file.
CODE_PATTERNS: list[tuple[str, tuple[str, str]]] = [
    (r"__attribute(?:__)?\s*\(\s*\([^;{}]{0,300}?\b_*(?:con|de)structor_*\b|"
     r"(?:\[|<:)\s*(?:\[|<:)[^\[\];{}]{0,300}?\b_*(?:con|de)structor_*\b|"
     r"#\s*pragma\s+(?:init|fini|startup|exit)\b|"
     r"(?<![\w:.>])_(?:init|fini)\s*\([^;{}()]{0,100}\)\s*\{", _LOAD),
    (r"\bSet\w*Allocator\w*|\bsetAllocator\w*|"
     rf"\bCUDACachingAllocator\s*::\s*(?!(?:{_ALLOCATOR_OK})\b)\w+|"
     r"\bcow\s*::|\b_?lazy_clone\w*|\bCOW(?:Deleter\w*|\.h)\b|\bcow_deleter\w*|\bmake_data_ptr\b|"
     r"\bInefficientStdFunctionContext\b|\bcompare_exchange_deleter\b|\bunsafe_reset_data_and_ctx\b|"
     r"\brelease_context\b|\bset_data_ptr\w*|\bunsafe_set_storage\b|\bset_storage_\w+|\b\w*StorageImplCreate\w*|"
     r"\bDataPtr\s+allocate\s*\(|\ballocate\s*\([^;{}()]{0,80}\)\s*const\s*->\s*[\w:]*DataPtr\b|"
     r"\braw_deleter\s*\(\s*\)\s*const\b|"
     r"\bcopy_data\s*\(", _ALLOC),
    (r"\b(?:mprotect|pkey_\w+|madvise|posix_madvise|process_madvise|userfaultfd|mremap|remap_file_pages)\s*\(|"
     r"\b(?:(?:__NR_|SYS_)(?:mprotect|pkey_\w+|madvise|process_madvise|mremap|remap_file_pages)|"
     r"(?:__NR_|SYS_)?userfaultfd|UFFDIO_\w+|uffdio_\w+|UFFD_\w+|PROT_(?:NONE|READ|WRITE|EXEC)|MADV_\w+|PKEY_\w+)\b",
     _PAGES),
    (r"\b(?:sigaction|sigaltstack|sigsetjmp|siglongjmp|setjmp|longjmp|_setjmp|_longjmp|__builtin_setjmp|"
     r"__builtin_longjmp|sigprocmask|pthread_sigmask|signalfd|sigemptyset|sigfillset|sigaddset|sigwait\w*|"
     r"sigsuspend|makecontext|swapcontext|setcontext|getcontext)\s*\(|"
     r"\b(?:SIG_(?:IGN|DFL|ERR|BLOCK|UNBLOCK|SETMASK)|SA_(?:SIGINFO|ONSTACK|NODEFER|RESETHAND)|jmp_buf|"
     r"sigjmp_buf|siginfo_t|ucontext_t|sighandler_t|__sighandler_t|sigset_t)\b|"
     r"\bstd\s*::\s*signal\s*\(|(?:^|[^\w\s>:])\s*::\s*signal\s*\(", _SIGNALS),
    (r"\b_GLOBAL_OFFSET_TABLE_\b|\b_DYNAMIC\b|\bstruct\s+link_map\b|\blink_map\s*\*|\b_r_debug\b|"
     r"\bElf(?:32|64)?_(?:Addr|Rel|Rela|Sym|Dyn|Ehdr|Phdr|Shdr|Word|Xword|Half|Off)\b|\bElfW\s*\(|\bgetauxval\b|"
     r"\bcu(?:da)?GetExportTable\b|\b__cuda(?:Un)?Register\w*", _SYMBOLS),
]
# Words that are also English or common identifiers: only in strings that read as C/C++.
WORD_PATTERNS: list[tuple[str, tuple[str, str]]] = [
    (r"\b(?:mprotect|madvise|pkey_mprotect)\b", _PAGES),
    (rf"\b(?:sigaction|sigsetjmp|siglongjmp|setjmp|longjmp|{_SIGNAL_NAMES})\b", _SIGNALS),
]
_CLASS = re.compile(r"\b(?:class|struct)\s")
# Base classes that make an allocator, a storage or a tensor of the candidate's own.
_BASE = re.compile(r"\b(?:\w*Allocator|TensorImpl|StorageImpl)\b")
_ENTRY_POINT = re.compile(r"\b(?:cuGetProcAddress\w*|cudaGetDriverEntryPoint\w*)\b")
# The driver functions an honest kernel takes by name: the TMA descriptor encoders (libcuda is not linked).
_ENTRY_OK = re.compile(r'\s*\(\s*"cuTensorMap(?:Encode\w*|ReplaceAddress)"\s*,')
# Words before a call that are not a return type (`return signal(11, h);` is a call).
_NOT_TYPES = {"return", "else", "case", "throw", "co_return", "co_yield", "do", "new", "delete", "sizeof", "and",
              "or", "not", "decltype"}
# A number is no handler: `signal(x, 2.f)` is the kernel's own function.
_NUMBER = re.compile(r"[-+]?(?:\d[\d.']*|\.\d+)(?:[eE][-+]?\d+)?[fFlLuU]*")
_SIGNAL_CALL = re.compile(r"(?<![\w.>:])signal\s*\(")
_DATA_PTR = re.compile(r"\bDataPtr\b\s*(?:\w+\s*)?[({]")
_LITERAL_PATTERNS: list[tuple[str, tuple[str, str]]] = [
    (r"(?<![\w.])\.(?:(?:pre)?init_array|fini_array|ctors|dtors)\b|[\"']\s*\.(?:init|fini)\b|"
     r"\.section\s+\.?(?:init|fini)\b|(?:__asm__|\basm|\balias|\bweakref|\.symver)\s*\(?\s*\"[^\"]{0,200}?\b_(?:init|fini)\b",
     _LOAD),
    (r"(?<![\w.])\.(?:got(?:\.plt)?|plt|rela?\.(?:plt|dyn))\b", _SYMBOLS),
]

_COMPILED = ([(re.compile(p, re.M), c, False) for p, c in CODE_PATTERNS]
             + [(re.compile(p), c, True) for p, c in WORD_PATTERNS])
_LITERALS = [(re.compile(p), c) for p, c in _LITERAL_PATTERNS]


def _shown(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip(" ([{<"))


def lowlevel_findings(code: str, kept: str, read: str, cpp_like: bool) -> Iterator[tuple[str, int, str]]:
    """(check, line, message) for each trick in one C++ string, in text.py's three views;
    words are checked only where `cpp_like` (the text reads as C/C++, not as prose or Python)."""
    for pattern, (check, message), words in _COMPILED:
        m = pattern.search(code) if cpp_like or not words else None
        if m:
            yield check, line_at(code, m.start()), f"{message} (`{_shown(m.group(0))}`)"
    for pattern, (check, message) in _LITERALS:
        m = pattern.search(read)
        if m:
            yield check, line_at(read, m.start()), f"{message} (`{_shown(m.group(0))}`)"
    for m in _ENTRY_POINT.finditer(code):
        if not _ENTRY_OK.match(kept, m.end()):
            yield _SYMBOLS[0], line_at(code, m.start()), f"{_SYMBOLS[1]} (`{m.group(0)}`)"
            break
    base = _base_class(code)
    if base is not None:
        yield _ALLOC[0], line_at(code, base[0]), f"{_ALLOC[1]} (a subclass of `{base[1]}`)"
    for m in _DATA_PTR.finditer(code):  # a DataPtr with a context and a deleter of its own
        parsed = call_args(code, m.end() - 1)
        if parsed and len(parsed[0]) >= 3:
            yield _ALLOC[0], line_at(code, m.start()), f"{_ALLOC[1]} (`DataPtr` with a deleter)"
            break
    if cpp_like:
        m = _libc_signal(code)
        if m is not None:
            yield _SIGNALS[0], line_at(code, m), f"{_SIGNALS[1]} (`signal` called with a handler or taken by address)"


def _base_class(code: str) -> tuple[int, str] | None:
    """A class whose base clause (after a single `:`, before its body) names `Allocator`,
    `TensorImpl` or `StorageImpl`."""
    for m in _CLASS.finditer(code):
        head = code[m.end():m.end() + 400]
        head = head[:min((i for i in (head.find("{"), head.find(";")) if i >= 0), default=len(head))]
        colon = re.search(r"(?<!:):(?!:)", head)
        found = _BASE.search(head, colon.end()) if colon else None
        if found:
            return m.start(), found.group(0)
    return None


def _libc_signal(code: str) -> int | None:
    """Where libc's `signal(sig, handler)` is called (two arguments, the second no number, not a
    declaration of the kernel's own `signal`) or its address taken (`&signal`, where no variable
    or function is called so)."""
    for m in _SIGNAL_CALL.finditer(code):
        parsed = call_args(code, m.end() - 1)
        typed = re.search(r"\b(\w+)\s*[*&]*\s*$", code[max(0, m.start() - 40):m.start()])  # `float signal(`
        declared = typed is not None and typed.group(1) not in _NOT_TYPES
        if parsed and len(parsed[0]) == 2 and not declared and not _NUMBER.fullmatch(parsed[0][1]):
            return m.start()
    named = re.search(r"(?<![\w.>:])(?!return\b|else\b|case\b)[A-Za-z_][\w:<>]*[\s*&]+signal\s*[=;,\[)({]", code)
    taken = re.search(r"(?:&|=)\s*(?:std\s*)?(?:::\s*)?\bsignal\b\s*[;,)]", code)
    return taken.start() if taken and not named else None
