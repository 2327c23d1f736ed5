"""Kernel sources shared by the tests, so that one cold C++ build serves many candidates.

Every candidate in the test suite that needs a working extension embeds TESTLIB_CPP
unchanged (same text -> same build directory -> one build per CI run). Each test picks the
function it needs: an honest kernel, a wrong one, one that crashes, one that hangs, ...
"""

import uuid

TESTLIB_CPP = r"""
#include <torch/extension.h>
#include <cstdlib>
#include <csignal>
#include <cstring>
#include <cstdint>

// Honest kernel: out = relu(x * scale + y), one pass, written into a fresh tensor.
torch::Tensor scale_add_relu(torch::Tensor x, torch::Tensor y, double scale) {
    TORCH_CHECK(x.is_contiguous() && y.is_contiguous(), "inputs must be contiguous");
    auto out = torch::empty_like(x);
    const float* a = x.data_ptr<float>();
    const float* b = y.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const int64_t n = x.numel();
    const float s = static_cast<float>(scale);
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) {
        float v = a[i] * s + b[i];
        o[i] = v > 0.f ? v : 0.f;
    }
    return out;
}

// Wrong answer: forgets the relu.
torch::Tensor no_relu(torch::Tensor x, torch::Tensor y, double scale) {
    auto out = torch::empty_like(x);
    const float* a = x.data_ptr<float>();
    const float* b = y.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = a[i] * static_cast<float>(scale) + b[i];
    return out;
}

// Leaves the last element unwritten: only poisoned fresh memory reveals it.
torch::Tensor skip_last(torch::Tensor x, torch::Tensor y, double scale) {
    auto out = torch::empty_like(x);
    const float* a = x.data_ptr<float>();
    const float* b = y.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i + 1 < x.numel(); ++i) {
        float v = a[i] * static_cast<float>(scale) + b[i];
        o[i] = v > 0.f ? v : 0.f;
    }
    return out;
}

// Computes the answer into x itself and returns x: modifies the input and aliases it.
torch::Tensor in_place(torch::Tensor x, torch::Tensor y, double scale) {
    float* a = x.data_ptr<float>();
    const float* b = y.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
        float v = a[i] * static_cast<float>(scale) + b[i];
        a[i] = v > 0.f ? v : 0.f;
    }
    return x;
}

// Falls back to ATen compute from C++ (the dispatcher-level guard must see it).
torch::Tensor aten_fallback(torch::Tensor x, torch::Tensor y, double scale) {
    return torch::relu(x * scale + y);
}

// Returns zeros of the right shape.
torch::Tensor zeros_out(torch::Tensor x, torch::Tensor y, double scale) {
    return torch::zeros_like(x);
}

// Rounds the inputs to bfloat16 first: fine under --precision relaxed, not under strict.
static inline float to_bf16(float v) {
    uint32_t bits; std::memcpy(&bits, &v, 4);
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000u;
    float r; std::memcpy(&r, &bits, 4); return r;
}
torch::Tensor bf16_inputs(torch::Tensor x, torch::Tensor y, double scale) {
    auto out = torch::empty_like(x);
    const float* a = x.data_ptr<float>();
    const float* b = y.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
        float v = to_bf16(a[i]) * static_cast<float>(scale) + to_bf16(b[i]);
        o[i] = v > 0.f ? v : 0.f;
    }
    return out;
}

void segfault_now() { volatile int* p = nullptr; *p = 1; }
void abort_now() { std::abort(); }
void spin_forever() { volatile unsigned long long i = 0; while (true) { i = i + 1; } }
"""

TESTLIB_FUNCTIONS = [
    "scale_add_relu", "no_relu", "skip_last", "in_place", "aten_fallback", "zeros_out",
    "bf16_inputs", "segfault_now", "abort_now", "spin_forever",
]

# A source that does not compile: a missing semicolon and an undeclared name, on known lines.
BROKEN_CPP = r"""
#include <torch/extension.h>

torch::Tensor scale_add_relu(torch::Tensor x, torch::Tensor y, double scale) {
    auto out = torch::empty_like(x)
    return undeclared_thing(out);
}
"""


def candidate_source(forward_body: str, *, init: str = "", header: str = "", functions=None) -> str:
    """Source of a candidate file that builds TESTLIB_CPP and runs `forward_body`.

    `forward_body` is the body of ModelNew.forward(self, x, y); `_ext` is the built module.
    """
    funcs = TESTLIB_FUNCTIONS if functions is None else functions
    body = "\n".join("        " + line for line in forward_body.strip("\n").splitlines())
    init_body = "\n".join("        " + line for line in init.strip("\n").splitlines()) or "        pass"
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
{header}
_ext = load_inline(
    name="kcoder_testlib",
    cpp_sources=[{TESTLIB_CPP!r}],
    functions={funcs!r},
    extra_cflags=["-O2", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
{init_body}

    def forward(self, x, y):
{body}
'''


# Older name, kept for callers; `__test__ = False` stops pytest from collecting it.
testlib_candidate = candidate_source
testlib_candidate.__test__ = False  # type: ignore[attr-defined]


# CUDA counterpart for the gpu tests: one build serves every CUDA test candidate. Binding-layer
# style, like the examples: the torch wrappers live in cpp_sources and the .cu is plain CUDA
# (raw-pointer launchers), so kcoder can compile it without the torch headers.
CUDA_TESTLIB_CPP = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime_api.h>

cudaError_t launch_scale_add_relu(const float* a, const float* b, float* o, int64_t n, float s,
                                  cudaStream_t stream);
cudaError_t launch_hidden_stream(const float* a, const float* b, float* o, int64_t n, float s,
                                 cudaStream_t current);
cudaError_t launch_busy_scale_add_relu(const float* a, const float* b, float* o, int64_t n, float s, int reps,
                                       cudaStream_t stream);

// Honest kernel: out = relu(x * scale + y), written into a fresh tensor.
torch::Tensor scale_add_relu(torch::Tensor x, torch::Tensor y, double scale) {
    TORCH_CHECK(x.is_cuda() && y.is_cuda(), "CUDA tensors expected");
    const c10::cuda::CUDAGuard device_guard(x.device());
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && y.scalar_type() == torch::kFloat32,
                "float32 tensors expected");
    TORCH_CHECK(x.is_contiguous() && y.is_contiguous(), "contiguous tensors expected");
    TORCH_CHECK(x.sizes() == y.sizes(), "x and y must have the same shape");
    auto out = torch::empty_like(x);
    C10_CUDA_CHECK(launch_scale_add_relu(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(),
                                         x.numel(), (float)scale, c10::cuda::getCurrentCUDAStream()));
    return out;
}

// Writes far outside the output: an illegal memory access.
torch::Tensor out_of_bounds(torch::Tensor x, torch::Tensor y, double scale) {
    auto out = torch::empty_like(x);
    C10_CUDA_CHECK(launch_scale_add_relu(x.data_ptr<float>(), y.data_ptr<float>(),
                                         out.data_ptr<float>() + (1ll << 40), x.numel(), (float)scale,
                                         c10::cuda::getCurrentCUDAStream()));
    return out;
}

// Allocates the output and never launches a kernel.
torch::Tensor never_launched(torch::Tensor x, torch::Tensor y, double scale) {
    return torch::empty_like(x);
}

// Honest, and slow on the device by `reps` dependent steps per element (on the current stream).
torch::Tensor busy_scale_add_relu(torch::Tensor x, torch::Tensor y, double scale, int64_t reps) {
    auto out = torch::empty_like(x);
    C10_CUDA_CHECK(launch_busy_scale_add_relu(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(),
                                              x.numel(), (float)scale, (int)reps,
                                              c10::cuda::getCurrentCUDAStream()));
    return out;
}
// Does its work on a private stream the timer does not see (see launch_hidden_stream).
torch::Tensor hidden_stream(torch::Tensor x, torch::Tensor y, double scale) {
    auto out = torch::empty_like(x);
    C10_CUDA_CHECK(launch_hidden_stream(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(),
                                        x.numel(), (float)scale, c10::cuda::getCurrentCUDAStream()));
    return out;
}
"""

CUDA_TESTLIB_CU = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void scale_add_relu_kernel(const float* a, const float* b, float* o, int64_t n, float s) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) { float v = a[i] * s + b[i]; o[i] = v > 0.f ? v : 0.f; }
}

// Same kernel, launched many times over: slow enough that hidden work is measurable.
__global__ void slow_scale_add_relu_kernel(const float* a, const float* b, float* o, int64_t n, float s) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = a[i] * s + b[i];
        for (int k = 0; k < 20000; ++k) v = v * 1.0000001f - 1e-30f * v;
        float r = a[i] * s + b[i];
        o[i] = (r > 0.f ? r : 0.f) + 0.f * v;
    }
}

// The same, with the number of dependent steps chosen at run time.
__global__ void busy_scale_add_relu_kernel(const float* a, const float* b, float* o, int64_t n, float s, int reps) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = a[i] * s + b[i];
        for (int k = 0; k < reps; ++k) v = v * 1.0000001f - 1e-30f * v;
        float r = a[i] * s + b[i];
        o[i] = (r > 0.f ? r : 0.f) + 0.f * v;
    }
}
static inline int blocks_for(int64_t n) { return (int)((n + 255) / 256); }
cudaError_t launch_busy_scale_add_relu(const float* a, const float* b, float* o, int64_t n, float s, int reps,
                                       cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    busy_scale_add_relu_kernel<<<blocks_for(n), 256, 0, stream>>>(a, b, o, n, s, reps);
    return cudaGetLastError();
}

cudaError_t launch_scale_add_relu(const float* a, const float* b, float* o, int64_t n, float s,
                                  cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    scale_add_relu_kernel<<<blocks_for(n), 256, 0, stream>>>(a, b, o, n, s);
    return cudaGetLastError();
}

// Launches on a private stream the timer does not see (a token paste whose macro the candidate
// file holds in another string constant hides the API name from the static checks, which read
// one constant at a time: this is the dynamic check's test) and does not wait for it.
#define KC_PASTE(a, b) a##b
cudaError_t launch_hidden_stream(const float* a, const float* b, float* o, int64_t n, float s,
                                 cudaStream_t current) {
    static cudaStream_t side = nullptr;
    if (!side) KC_PASTE(cudaStream, CreateWithFlags)(&side, cudaStreamNonBlocking);
    cudaStreamSynchronize(current);  // let the poison fill land first
    slow_scale_add_relu_kernel<<<blocks_for(n), 256, 0, side>>>(a, b, o, n, s);
    return cudaGetLastError();
}
"""

CUDA_TESTLIB_FUNCTIONS = ["scale_add_relu", "out_of_bounds", "never_launched", "hidden_stream",
                          "busy_scale_add_relu"]


def cuda_candidate_source(forward_body: str) -> str:
    """A CUDA candidate for tests/problems/scale_add.py built from CUDA_TESTLIB_*. The .cu text
    is two string constants joined at run time, split after KC_PASTE's definition: the static
    checks expand the macros of one constant, and the hidden stream must reach the dynamic check
    (the source built is CUDA_TESTLIB_CU byte for byte, so the one build is shared as before)."""
    body = "\n".join("        " + line for line in forward_body.strip("\n").splitlines())
    split = CUDA_TESTLIB_CU.index("#define KC_PASTE")
    split = CUDA_TESTLIB_CU.index("\n", split) + 1
    head, tail = CUDA_TESTLIB_CU[:split], CUDA_TESTLIB_CU[split:]
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_ext = load_inline(
    name="kcoder_cuda_testlib",
    cpp_sources=[{CUDA_TESTLIB_CPP!r}],
    cuda_sources=[{head!r} + {tail!r}],
    functions={CUDA_TESTLIB_FUNCTIONS!r},
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
{body}
'''


# Red team of the evaluator's trust boundary (tests/integrity/test_trust_boundary.py): every
# native attack in one source, so one cold build serves them all. Each ATTACK_PARTS entry is
# one attack's code on its own, for the static-check tests (which never build it). Every
# name, path and port comes from the Python side, so the C++ holds no test-specific value.
ATTACK_INCLUDES = r"""
#include <torch/extension.h>
#include <Python.h>
#include <unistd.h>
#include <dlfcn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
"""

# Honest kernel, so that an attack that has no effect leaves an acceptable candidate.
ATTACK_KERNEL = r"""
torch::Tensor scale_add_relu(torch::Tensor x, torch::Tensor y, double scale) {
    TORCH_CHECK(x.is_contiguous() && y.is_contiguous(), "inputs must be contiguous");
    auto out = torch::empty_like(x);
    const float* a = x.data_ptr<float>();
    const float* b = y.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const int64_t n = x.numel();
    const float s = static_cast<float>(scale);
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) {
        float v = a[i] * s + b[i];
        o[i] = v > 0.f ? v : 0.f;
    }
    return out;
}
"""

# Shared by the daemon and fork attacks (it names and hides the process they start).
ATTACK_DAEMON_HELPER = r"""
extern char** environ;

// What a detached process does: take a name that tests can find in the process list, optionally
// wipe its environment strings (the judge finds the candidate's processes by a marker in
// each process's environment), then for a bounded time: mode 0 sleeps, mode 1 spins (CPU
// load), mode 2 sleeps while process `watch` lives and spins once it is gone (load aimed at
// the baselines, which are timed after the candidate's process has ended).
static void become_daemon(const std::string& name, int64_t mode, bool hide, pid_t watch) {
    prctl(PR_SET_NAME, name.c_str(), 0, 0, 0);
    if (hide) {
        for (char** e = environ; e && *e; ++e) std::memset(*e, 0, std::strlen(*e));
    }
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    volatile unsigned long long i = 0;
    while (std::chrono::steady_clock::now() < until) {
        bool spin = mode == 1 || (mode == 2 && kill(watch, 0) != 0);
        if (spin) { for (int k = 0; k < 1000000; ++k) i = i + 1; }
        else { usleep(20000); }
    }
    _exit(0);
}
"""

ATTACK_PARTS = {
    # Forged replies written from C++ to every descriptor the process might hold.
    "forge": r"""
int64_t forge_replies(const std::string& lines) {
    int64_t written = 0;
    for (int fd = 0; fd < 256; ++fd) {
        if (::write(fd, lines.data(), lines.size()) == (ssize_t)lines.size()) ++written;
    }
    return written;
}
""",
    # A file written with C stdio, wherever the caller says.
    "fopen": r"""
bool write_file(const std::string& path, const std::string& text) {
    FILE* f = fopen(path.c_str(), "w");
    if (!f) return false;
    fputs(text.c_str(), f);
    fclose(f);
    return true;
}
""",
    # A TCP connection to 127.0.0.1:port; 0 when it connected, the errno otherwise.
    "connect": r"""
int64_t connect_to(int64_t port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return errno;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = connect(s, (sockaddr*)&addr, sizeof(addr));
    int err = rc == 0 ? 0 : errno;
    if (rc == 0) { const char hello[] = "hello from the candidate"; send(s, hello, sizeof(hello), 0); }
    close(s);
    return err;
}
""",
    # The classic daemon: fork, setsid, fork again; the grandchild lives on (named `name`).
    "daemon": r"""
int64_t start_daemon(const std::string& name, int64_t mode, bool hide) {
    pid_t watch = getpid();
    pid_t child = fork();
    if (child < 0) return -errno;
    if (child == 0) {
        setsid();
        pid_t grandchild = fork();
        if (grandchild == 0) become_daemon(name, mode, hide, watch);
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    return child;
}
""",
    # fork() reached through a function pointer, or looked up with dlsym; the child sleeps.
    "fork-pointer": r"""
int64_t fork_via_pointer(const std::string& name, bool via_dlsym) {
    pid_t (*fp)() = &fork;
    if (via_dlsym) fp = reinterpret_cast<pid_t (*)()>(dlsym(RTLD_DEFAULT, "fork"));
    if (!fp) return -1;
    pid_t pid = fp();
    if (pid == 0) become_daemon(name, 0, false, 0);
    return pid;
}
""",
    # Timer hijack through the Python C API: time.perf_counter keeps its identity, but the C
    # function behind it now returns the real value divided by `factor`.
    "timer-hijack": r"""
static PyCFunction real_perf_counter = nullptr;
static double perf_counter_factor = 100.0;

static PyObject* slow_perf_counter(PyObject* self, PyObject* unused) {
    PyObject* real = real_perf_counter(self, unused);
    if (!real) return nullptr;
    double value = PyFloat_AsDouble(real);
    Py_DECREF(real);
    return PyFloat_FromDouble(value / perf_counter_factor);
}

bool hijack_perf_counter(double factor) {
    PyObject* modules = PySys_GetObject("modules");
    PyObject* time_module = modules ? PyDict_GetItemString(modules, "time") : nullptr;
    if (!time_module) return false;
    PyObject* fn = PyObject_GetAttrString(time_module, "perf_counter");
    if (!fn) { PyErr_Clear(); return false; }
    bool ok = PyCFunction_Check(fn);
    if (ok) {
        PyMethodDef* def = ((PyCFunctionObject*)fn)->m_ml;
        if (!real_perf_counter) real_perf_counter = def->ml_meth;
        perf_counter_factor = factor;
        def->ml_meth = (PyCFunction)slow_perf_counter;
    }
    Py_DECREF(fn);
    return ok;
}
""",
    # Background CPU load: a detached native thread (a daemon process is `start_daemon(..., true, ...)`).
    "spin-thread": r"""
void spin_thread(double seconds) {
    std::thread([seconds] {
        auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        volatile unsigned long long i = 0;
        while (std::chrono::steady_clock::now() < until) i = i + 1;
    }).detach();
}
""",
}

ATTACK_CPP = ATTACK_INCLUDES + ATTACK_KERNEL + ATTACK_DAEMON_HELPER + "".join(ATTACK_PARTS.values())


def attack_part_cpp(name: str) -> str:
    """One attack of ATTACK_PARTS alone, with the honest kernel and only the torch header (and
    the daemon helper where it needs it): what the static checks see of that attack. Not built."""
    helper = ATTACK_DAEMON_HELPER if name in ("daemon", "fork-pointer") else ""
    return "#include <torch/extension.h>\n" + ATTACK_KERNEL + helper + ATTACK_PARTS[name]
ATTACK_FUNCTIONS = ["scale_add_relu", "forge_replies", "write_file", "connect_to", "start_daemon",
                    "fork_via_pointer", "hijack_perf_counter", "spin_thread"]


def attack_candidate_source(forward_body: str, *, init: str = "", header: str = "", cpp: str = ATTACK_CPP,
                            functions=None) -> str:
    """Source of a candidate that builds `cpp` (default ATTACK_CPP, one shared build) as `_ext`;
    `init` and `forward_body` are the bodies of ModelNew.__init__ (after `self.scale = scale`)
    and ModelNew.forward(self, x, y)."""
    funcs = ATTACK_FUNCTIONS if functions is None else functions
    body = "\n".join("        " + line for line in forward_body.strip("\n").splitlines())
    init_body = "\n".join("        " + line for line in init.strip("\n").splitlines()) or "        pass"
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
{header}
_ext = load_inline(
    name="kcoder_attacklib",
    cpp_sources=[{cpp!r}],
    functions={funcs!r},
    extra_cflags=["-O2", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
{init_body}

    def forward(self, x, y):
{body}
'''


# A tunable candidate (kcoder tune): TESTLIB_CPP's build, knobs that choose the kernel in Python.
# The nonce (a comment) gives each call a fresh tuning-cache key; the build stays shared.
_TUNE_HEADER = '''# tuning-cache nonce {nonce}
TUNE = {{"KERNEL": ["relu", "no_relu"], "CHUNK": [1, 2, 4]}}
CONFIG = {{"KERNEL": "no_relu", "CHUNK": 2}}
TUNE_CONSTRAINTS = ["CHUNK <= 2"]
'''
_TUNE_FORWARD = '''kernel = _ext.scale_add_relu if CONFIG["KERNEL"] == "relu" else _ext.no_relu
return kernel(x, y, self.scale * CONFIG["CHUNK"] / CONFIG["CHUNK"])'''


def tunable_candidate() -> str:
    """A candidate with a 6-point TUNE space: 2 points refused by a constraint, 2 wrong, 2 valid."""
    return candidate_source(_TUNE_FORWARD, header=_TUNE_HEADER.format(nonce=uuid.uuid4().hex))


tunable_candidate.__test__ = False  # type: ignore[attr-defined]


# The outer clock's red team (tests/integrity/test_outer_clock.py, tests/gpu/test_outer_clock_gpu.py).
# Every Clock the candidate's process makes reports a third of the time it measured: an
# instance attribute shadows Clock.call (whose identity, which the worker checks, is unchanged).
UNDER_REPORT_3X = '''
import kcoder.evaluate.harness.timing as _timing

_made = _timing.Clock.__init__


def _third(self, device):
    _made(self, device)
    measured = type(self).call

    def call(fn, inputs):
        out, read = measured(self, fn, inputs)
        return out, lambda: read() / 3

    self.call = call


_timing.Clock.__init__ = _third
'''


# A red-team extension that reaches the kernel directly: the `syscall` instruction spelt as
# bytes, no libc function named (a static check has nothing to see). `plant(paths, proof)`
# creates (O_WRONLY|O_CREAT|O_TRUNC) each newline-separated path and writes "planted" into
# it, then writes "PATH RESULT" lines (a file descriptor, or -errno) into `proof`. x86-64 only.
RAW_SYSCALL_CPP = r"""
#include <string>

static long raw3(long n, long a, long b, long c) {
#if defined(__x86_64__)
    long ret;
    __asm__ volatile (".byte 0x0f, 0x05" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return ret;
#else
    return -38;
#endif
}

static long make_file(const std::string& path, const char* data, long size) {
    long fd = raw3(2, (long)path.c_str(), 01 | 0100 | 01000, 0644);
    if (fd >= 0) { raw3(1, fd, (long)data, size); raw3(3, fd, 0, 0); }
    return fd;
}

std::string plant(std::string paths, std::string proof) {
    std::string report;
    size_t start = 0;
    while (start < paths.size()) {
        size_t end = paths.find('\n', start);
        if (end == std::string::npos) end = paths.size();
        std::string path = paths.substr(start, end - start);
        if (!path.empty()) report += path + " " + std::to_string(make_file(path, "planted", 7)) + "\n";
        start = end + 1;
    }
    make_file(proof, report.data(), (long)report.size());
    return report;
}
"""
