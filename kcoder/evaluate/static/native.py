"""Static checks on the C++/CUDA text of a candidate: every string constant of the file, read
as the compiler reads it (text.py: comments and literals blanked, line splices joined,
digraphs and universal character names read), and once more with the macros it defines
expanded and `##` pasted, so a name spelled through the preprocessor is still that name.

Names that are also English words or common C++ identifiers (`write`, `open`, `clone`, `bind`,
`system`, `kill`) count only as calls or when their address is taken, and only in strings that
read as C/C++; names with no honest use in a kernel (`fork`, `setsid`, `execve`, ...) count as
calls in any string and anywhere in C/C++ text, so a function pointer to one is caught too.
Timer and CUDA runtime symbols count only when the candidate *defines* them (a call is
honest). Python reached from C++ is interp.py's; load-time code, allocators, page
protection, signals and symbol tables are lowlevel.py's. These checks are a first line:
the sandbox and the dynamic checks back them up.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from kcoder.evaluate.static.interp import interpreter_findings
from kcoder.evaluate.static.lowlevel import lowlevel_findings
from kcoder.evaluate.static.text import code_only, line_at, literals_blanked, literals_read, preprocessed, with_literals

# A call (not a method: `x.clone()`, `cg::wait()`), or the function's address taken (`&kill`, `= system;`).
_CALL = r"(?<![\w.>:])(?:::\s*)?\b(?:{names})\s*\("
_ADDRESS_TAKEN = r"(?:&\s*|=\s*|\breturn\s+)(?:::\s*)?\b(?:{names})\b\s*[;,)]"
# `write(fd, ...)`: these names count as calls only on a descriptor (a number, a name with `fd`
# in it, STDOUT_FILENO) or qualified as the global `::write`.
_FD_CALL = (r"(?<![\w.>:])\b(?:{names})\s*\(\s*(?:\d+\s*[,)]|[A-Za-z_]*fd\w*\s*[,)]|STD(?:IN|OUT|ERR)_FILENO)|"
            r"(?<![\w])::\s*(?:{names})\s*\(")

_PROCESS_ANY = (r"fork|vfork|setsid|daemon|posix_spawnp?|execv[pe]*|execl[pe]*|fexecve|popen|pclose|prctl|ptrace|"
                r"clone3|pidfd_\w+|setpgid|setpgrp|syscall|__NR_\w+|SYS_\w+|waitpid|std::system|quick_exit|"
                r"at_quick_exit")
_PROCESS_WORDS = r"system|kill|killpg"
_FILE_ANY = (r"fopen|fopen64|freopen|fdopen|ifstream|ofstream|fstream|basic_[io]?fstream|filebuf|openat|creat|"
             r"mkstemp|mkdtemp|tmpfile|mkfifo|memfd_create|ftruncate|shm_open|mmap|mmap64|munmap|sendfile|"
             r"dup2|dup3|pipe2|symlink|unlinkat|renameat2?|opendir|readdir|scandir|std::filesystem|O_WRONLY|"
             r"O_RDWR|O_CREAT")
_FILE_WORDS = r"open|unlink|rename|mkdir|rmdir|chmod|chown|pipe"
_FD_WORDS = r"write|pwrite|writev|pwritev|read|pread|close|dup|lseek|fsync|ioctl|fcntl"
_NETWORK = (r"\bsocket\s*\(|\bsockaddr\w*|\bAF_(?:INET6?|UNIX|LOCAL|NETLINK|PACKET)\b|\bgetaddrinfo\b|"
            r"\bgethostbyname\w*|\binet_(?:addr|pton|aton)\b|\bhtons\b")
_SYMBOLS = (r"\bdl(?:open|mopen|sym|vsym|info|addr1?|_?iterate_phdr|close)\b|\bRTLD_\w+|\bLD_PRELOAD\b|\b__libc_\w+|"
            r"\b_dl_\w+")
# Timer and CUDA runtime/driver symbols a candidate must never define itself.
TIMER_SYMBOLS = (r"cudaEvent(?:ElapsedTime|Record|RecordWithFlags|Synchronize|Query|Create|CreateWithFlags|Destroy)|"
                 r"cuEvent(?:ElapsedTime|Record|Synchronize|Query)|cuda(?:Device|Stream|Ctx|Thread)Synchronize|"
                 r"cu(?:Ctx|Stream)Synchronize|cudaStreamWaitEvent|cudaLaunchKernel\w*|cuLaunchKernel\w*|"
                 r"cudaGetLastError|cudaPeekAtLastError|cudaMemcpy\w*|cudaMalloc\w*|cudaFree\w*|"
                 r"clock_gettime|gettimeofday|clock|timespec_get|time|rdtsc|__rdtsc|ncclAllReduce|nvtx\w+|"
                 r"cupti\w+|cudaProfilerSt\w+")
# A definition: the name, its parameter list (no nested parentheses), then a body or `__attribute__`.
_DEFINITION = re.compile(r"\b(" + TIMER_SYMBOLS + r")\s*\([^;{}()]*(?:\([^;{}()]*\)[^;{}()]*)*\)\s*"
                         r"(?:const\s*)?(?:noexcept\s*(?:\([^)]*\))?\s*)?(?:throw\s*\(\s*\)\s*)?"
                         r"(?:__THROW\s*)?(?:__attribute__\s*\(\(.*?\)\)\s*)?\{")
# The same names given to another symbol: asm labels, aliases, symbol versions.
_SYMBOL_ALIAS = re.compile(r'(?:__asm__|\basm|alias|\bweakref|\.symver)\s*\(?\s*"[^"]*\b(' + TIMER_SYMBOLS
                           + r'|fork|setsid|dlsym)\b[^"]*"')

CPP_PATTERNS: list[tuple[str, str, str]] = [
    (r"cudaStreamCreate|getStreamFromPool|getStreamFromExternal|setCurrentCUDAStream|"
     r"CUDAStreamGuard|cudaStreamBeginCapture|cudaGraphLaunch|cudaLaunchHostFunc|"
     r"cudaStreamPerThread|cudaEventCreate|cudaStreamAddCallback|cuStreamCreate", "stream",
     "creates or switches CUDA streams/graphs/events (work off the current stream escapes the timer)"),
    (r"std::thread|std::jthread|pthread_create|std::async|\bthrd_create\b|\bomp_set_num_threads\b|"
     r"\bkmp_set\w+", "thread", "starts native threads or changes the thread pool"),
    (rf"\b(?:{_PROCESS_ANY})\s*\(", "process", "starts, signals or detaches processes"),
    (rf"\b(?:{_FILE_ANY})\b", "file-io", "opens, writes or maps files or file descriptors"),
    (r"\b(?:secure_)?getenv\b|\benviron\b|\b__environ\b", "secrets", "reads the environment"),
    (_NETWORK, "network", "opens network connections"),
    (_SYMBOLS, "symbol-hijack", "looks up or interposes native symbols (dlsym, RTLD_NEXT, ...)"),
    (r"\bcudaStreamSetAttribute\b|\bcudaAccessPolicyWindow\b|\baccessPolicyWindow\b|"
     r"\bcudaLimitPersistingL2CacheSize\b|\bhitProp\b|\bmissProp\b|\bcudaAccessProperty\w+|"
     r"\bcudaLaunchAttributeAccessPolicyWindow\b|\bcudaStreamAttrValue\b|\bcudaCtxResetPersistingL2Cache\b|"
     r"\bCU_LIMIT_PERSISTING_L2_CACHE_SIZE\b|\bcuStreamSetAttribute\b", "l2-persist",
     "sets a persisting-L2 access policy (survives the L2 flush between timed calls)"),
    (r"\bcublas|\bcublasLt|at::cuda::blas|cblas_|\bmkl_|\bdnnl", "library-gemm", "calls a BLAS library directly"),
    (r"\bcudnn", "library-conv", "calls cuDNN directly"),
    (r"at::native::|at::cpu::|at::cuda::(?!getCurrentCUDAStream|CUDAGuard|OptionalCUDAGuard|"
     r"getCurrentDeviceProperties|getDeviceProperties|current_device|CUDAStream\b)[a-z_]+\s*\(|"
     r"at::_ops::|c10::Dispatcher|TORCH_LIBRARY_IMPL\s*\(\s*aten", "guard-evasion",
     "calls ATen kernels directly, bypassing the dispatcher"),
    # A static *variable* holding tensors (a static function returning one is fine).
    (r"\bstatic\s+(?:const\s+)?(?:torch|at)::Tensor\s*&?\s*\w+\s*(?:;|=|\{|\[)|"
     r"\bstatic\s+std::\w+\s*<[^;(){}]*(?:torch|at)::Tensor[^;(){}]*>\s*\w+\s*(?:;|=|\{)", "state",
     "keeps tensors in static storage (can carry outputs between calls)"),
]
# Names that are also English words: checked only in strings that read as C/C++ (a line ending
# in `;`, `{` or `}`, or a preprocessor line), so prose such as "the file system (ext4)" passes.
WORD_PATTERNS: list[tuple[str, str, str]] = [
    (rf"\b(?:{_PROCESS_ANY})\b|" + _CALL.format(names=_PROCESS_WORDS) + "|"
     + _ADDRESS_TAKEN.format(names=_PROCESS_WORDS + "|clone")
     + r"|(?<![\w.>:])\bclone\s*\([^;()]*,[^;()]*,", "process", "starts, signals or detaches processes"),
    (_CALL.format(names=_FILE_WORDS) + "|" + _FD_CALL.format(names=_FD_WORDS) + "|"
     + _ADDRESS_TAKEN.format(names=_FILE_WORDS + "|" + _FD_WORDS), "file-io",
     "opens, writes or maps files or file descriptors"),
    (_CALL.format(names="connect|bind|listen|accept4?|sendto|sendmsg|recvfrom|recvmsg"), "network",
     "opens network connections"),
]
_COMPILED = [(re.compile(pattern), check, message, False) for pattern, check, message in CPP_PATTERNS] + [
    (re.compile(pattern), check, message, True) for pattern, check, message in WORD_PATTERNS]
_LOOKS_LIKE_CODE = re.compile(r"[;{}][ \t]*$|^\s*#\s*(?:include|define|if|pragma)\b", re.M)
_CPP_ONLY = re.compile(r";|::|^\s*#\s*(?:include|define)\b", re.M)  # Python's `;` and `#` are rare, or in literals
# Paths into the judge's process or its descriptors; checked in every string, C++ or Python.
PROC_PATH = re.compile(r"(?<![\w.])/proc(?:/|\b)|/dev/(?:fd|shm|mem|kmem|tcp|udp)\b|\bproc/self\b")


def native_findings(text: str, allow: list[str]) -> Iterator[tuple[str, int, str]]:
    """(check, line offset within `text`, message) for each C++/CUDA trick in one string."""
    m = PROC_PATH.search(text)
    if m or text.strip("/") == "proc":
        where, what = (text[: m.start()].count("\n"), m.group(0)) if m else (0, text)
        yield "proc-access", where, f"names a /proc or /dev path (`{what}`): the judge's memory and descriptors"
    alias = _SYMBOL_ALIAS.search(text)
    if alias:
        yield ("timer-hijack", text[: alias.start()].count("\n"),
               f"C++/CUDA source gives a symbol the name `{alias.group(1)}` (asm label or alias)")
    code, kept = code_only(text), with_literals(text)
    looks_like_code = _LOOKS_LIKE_CODE.search(code) is not None
    # Names Python shares (getattr, .attr, __code__, signal): only in text that is C/C++, not Python.
    cpp_like = looks_like_code and _CPP_ONLY.search(code) is not None
    views = [(code, kept)]
    expanded = preprocessed(kept)  # macros expanded and `##` pasted, for names spelled through them
    if expanded is not None and expanded != kept:
        views.append((literals_blanked(expanded), expanded))
    seen: set[str] = set()  # one finding per check and string
    for code_view, kept_view in views:
        for check, line, message in _view_findings(code_view, kept_view, looks_like_code, cpp_like, allow, seen):
            if check not in seen:
                seen.add(check)
                yield check, line, f"C++/CUDA source {message}"


def _view_findings(code: str, kept: str, looks_like_code: bool, cpp_like: bool, allow: list[str],
                   seen: set[str]) -> Iterator[tuple[str, int, str]]:
    for pattern, check, message, words in _COMPILED:
        if (check == "library-gemm" and "gemm" in allow) or (check == "library-conv" and "conv" in allow):
            continue
        if check in seen:
            continue
        m = pattern.search(code) if looks_like_code or not words else None
        if m:
            yield check, line_at(code, m.start()), f"{message} (`{m.group(0).strip()}`)"
    read = literals_read(kept)
    if "python-from-cpp" not in seen:
        for line, message in interpreter_findings(code, kept, read, cpp_like):
            yield "python-from-cpp", line, message
    yield from lowlevel_findings(code, kept, read, cpp_like)
    definition = _DEFINITION.search(code)
    if definition:
        yield ("timer-hijack", line_at(code, definition.start()),
               f"defines `{definition.group(1)}` (replaces a timer or CUDA runtime function)")
