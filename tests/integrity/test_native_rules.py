"""Static rules for native code (issue 40, item 5), as defence in depth: the C++/CUDA text of a
candidate is refused when it reaches Python (any spelling), runs code when the library loads,
makes allocators or storages of its own, protects pages or handles signals, or takes native
symbols by name; each refusal names the construct. The honest code nearest to each rule, and
every honest source kcoder knows (tests/honest, the examples' solutions), pass. No builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcoder.evaluate.static import check_source

ROOT = Path(__file__).resolve().parents[2]


def cpp(code: str) -> str:
    """A Python module holding `code` as a C++ source string, as a candidate does."""
    return f"CPP = {code!r}\n"


def fn(body: str) -> str:
    return cpp("#include <torch/extension.h>\nvoid f(py::object o, torch::Tensor x) {\n    " + body + "\n}\n")


PY = "python-from-cpp"
# name: (C++ text, check, what the reason must name)
REFUSED = {
    # the Python C API
    "c-api-setattr": (fn('PyObject_SetAttrString(o.ptr(), "perf_counter", nullptr);'), PY, "PyObject_SetAttrString"),
    "c-api-getattr": (fn('PyObject* t = PyObject_GetAttrString(o.ptr(), "time");'), PY, "PyObject_GetAttrString"),
    "c-api-call": (fn("PyObject_CallObject(o.ptr(), nullptr);"), PY, "PyObject_CallObject"),
    "c-api-run": (fn('PyRun_SimpleString("import time");'), PY, "PyRun_SimpleString"),
    "c-api-import": (fn('PyObject* m = PyImport_ImportModule("time");'), PY, "PyImport_ImportModule"),
    "c-api-eval": (fn("PyObject* g = PyEval_GetGlobals();"), PY, "PyEval_GetGlobals"),
    "c-api-compile": (fn('Py_CompileString("x = 1", "<x>", 257);'), PY, "Py_CompileString"),
    "c-api-code": (fn('PyCode_NewEmpty("a", "b", 1);'), PY, "PyCode_NewEmpty"),
    "c-api-function": (fn("PyFunction_GetCode(o.ptr());"), PY, "PyFunction_GetCode"),
    "c-api-dict": (fn('PyDict_SetItemString(o.ptr(), "save", nullptr);'), PY, "PyDict_SetItemString"),
    "c-api-sys": (fn('PySys_GetObject("modules");'), PY, "PySys_GetObject"),
    "c-api-internal": (fn("_PyObject_GetDictPtr(o.ptr());"), PY, "_PyObject_GetDictPtr"),
    "c-api-struct": (fn("((PyFunctionObject*)o.ptr())->func_code = nullptr;"), PY, "PyFunctionObject"),
    "c-api-slot": (fn("auto* t = (PyTypeObject*)o.ptr(); t->tp_call = nullptr;"), PY, "PyTypeObject"),
    "c-api-slot-only": (fn("auto* t = type_of(o); t->tp_call = nullptr;"), PY, "->tp_call"),
    "c-api-type": (fn("*(void**)((char*)Py_TYPE(o.ptr()) + 128) = nullptr;"), PY, "Py_TYPE"),
    # pybind11 reaching Python, in every spelling
    "import-py": (fn('auto t = py::module_::import("time");'), PY, "py::module_::import"),
    "import-pybind11": (fn('auto t = pybind11::module_::import("time");'), PY, "pybind11::module_::import"),
    "import-old-module": (fn('auto t = py::module::import("time");'), PY, "py::module::import"),
    "import-spaced": (fn('auto t = py :: module_ :: import ("time");'), PY, "py :: module_ :: import"),
    "import-commented": (fn('auto t = pybind11::/* x */module_::import("time");'), PY, "import"),
    "import-type-alias": (cpp('using M = pybind11::module_;\nvoid f() { M::import("time"); }\n'), PY, "::import"),
    "eval-py": (fn('py::eval("1 + 1");'), PY, "py::eval"),
    "exec-pybind11": (fn('pybind11::exec("import time");'), PY, "pybind11::exec"),
    "eval-file": (fn('py::eval_file("x.py");'), PY, "py::eval_file"),
    "globals": (fn('auto g = pybind11::globals();'), PY, "pybind11::globals"),
    "getattr": (fn('auto c = py::getattr(o, "perf_counter");'), PY, "py::getattr"),
    "setattr-pybind11": (fn('pybind11::setattr(o, "perf_counter", o);'), PY, "pybind11::setattr"),
    "hasattr": (fn('bool h = py::hasattr(o, "save");'), PY, "py::hasattr"),
    "delattr": (fn('py::delattr(o, "save");'), PY, "py::delattr"),
    "getattr-adl": (fn('auto c = getattr(o, "perf_counter");'), PY, "getattr"),
    "reinterpret-borrow": (fn("auto h = py::reinterpret_borrow<py::object>(o.ptr());"), PY, "reinterpret_borrow"),
    "reinterpret-steal": (fn("auto h = pybind11::reinterpret_steal<pybind11::object>(o.ptr());"), PY,
                          "reinterpret_steal"),
    "attr-get": (fn('auto c = o.attr("perf_counter");'), PY, ".attr"),
    "attr-set": (fn('o.attr("save") = o;'), PY, ".attr"),
    "attr-arrow": (fn('auto* p = &o; p->attr("save");'), PY, "->attr"),
    "attr-member-pointer": (fn("auto a = &py::object::attr<const char*>;"), PY, "::attr"),
    "namespace-alias": (cpp('namespace foo = pybind11;\nvoid f() { foo::exec("import time"); }\n'), PY, "foo::exec"),
    "namespace-alias-chain": (cpp('namespace a = pybind11;\nnamespace b = a;\nvoid f() { b::eval("1"); }\n'), PY,
                              "b::eval"),
    "using-namespace-exec": (cpp('using namespace pybind11;\nvoid f() { exec("import time"); }\n'), PY, "exec"),
    "using-namespace-import": (cpp('using namespace pybind11;\nvoid f() { module_::import("time"); }\n'), PY,
                               "::import"),
    "using-declaration": (cpp('using pybind11::exec;\nvoid f() { exec("import time"); }\n'), PY, "pybind11::exec"),
    "namespace-reopened": (cpp('namespace pybind11 {\nvoid f(object o) { exec(str("x")); }\n}\n'), PY, "exec"),
    "eval-own-and-pybind": (cpp("__device__ float eval(float x) { return x; }\n"
                                'void f() { eval(py::str("import time")); }\n'), PY, "eval"),
    "dunder-literal": (fn('const char* name = "__code__";'), PY, "__code__"),
    "dunder-joined": (fn('const char* name = "__glo" "bals__";'), PY, "__globals__"),
    "dunder-escaped": (fn('const char* name = "\\x5f_dict__";'), PY, "__dict__"),
    "dunder-chars": (fn("char name[] = {'_', '_', 'c', 'o', 'd', 'e', '_', '_', 0};"), PY, "__code__"),
    "dunder-stringified": (cpp("#define S(x) #x\nconst char* n = S(__code__);\n"), PY, "__code__"),
    # ... through the preprocessor and the lexer
    "paste-c-api": (cpp('#define CAT(a, b) a##b\nvoid f() { CAT(Py, Run_SimpleString)("import time"); }\n'), PY,
                    "PyRun_SimpleString"),
    "paste-nested": (cpp("#define CAT(a, b) a ## b\n#define XCAT(a, b) CAT(a, b)\n#define P Py\n"
                         'void f() { XCAT(P, Import_ImportModule)("time"); }\n'), PY, "PyImport_ImportModule"),
    "paste-pybind": (cpp('#define CAT(a, b) a##b\nvoid f(py::object o) { CAT(get, attr)(o, "x"); }\n'), PY,
                     "getattr"),
    "paste-digraph": (cpp('%:define CAT(a, b) a%:%:b\nvoid f() { CAT(Py, Run_SimpleString)("x"); }\n'), PY,
                      "PyRun_SimpleString"),
    "paste-dunder": (cpp('#define CAT(a, b) a##b\n#define S(x) #x\nconst char* n = S(CAT(__co, de__));\n'), PY,
                     "__code__"),
    "macro-alias-attr": (cpp('#define GET attr\nvoid f(py::object o) { o.GET("perf_counter"); }\n'), PY, ".attr"),
    "macro-alias-namespace": (cpp('#define NS pybind11\nvoid f() { NS::exec("import time"); }\n'), PY,
                              "pybind11::exec"),
    "macro-alias-getattr": (cpp('#define GA getattr\nvoid f(py::object o) { GA(o, "perf_counter"); }\n'), PY,
                            "getattr"),
    "universal-character-name": (fn('Py\\u0052un_SimpleString("x");'), PY, "PyRun_SimpleString"),
    "line-splice": (fn('PyRun_Simple\\\nString("x");'), PY, "PyRun_SimpleString"),
    # code that runs when the library loads
    "constructor": (cpp("__attribute__((constructor)) static void boot() { }\n"), "load-time-code",
                    "__attribute__((constructor"),
    "constructor-priority": (cpp("__attribute__ ((constructor(101))) static void boot() { }\n"), "load-time-code",
                             "constructor"),
    "constructor-listed": (cpp("__attribute__((used, __constructor__)) static void boot() { }\n"), "load-time-code",
                           "__constructor__"),
    "constructor-cxx11": (cpp("[[gnu::constructor]] static void boot() { }\n"), "load-time-code", "gnu::constructor"),
    "destructor": (cpp("[[gnu::destructor]] static void bye() { }\n"), "load-time-code", "destructor"),
    "constructor-pasted": (cpp("#define A(x) __attribute__((x))\n#define C(a, b) a##b\n"
                               "A(C(constr, uctor)) static void boot() { }\n"), "load-time-code", "constructor"),
    "init-array": (cpp('static void boot() { }\n__attribute__((section(".init_array"))) void (*p)() = &boot;\n'),
                   "load-time-code", ".init_array"),
    "ctors-asm": (cpp('asm(".section .ctors");\n'), "load-time-code", ".ctors"),
    "init-definition": (cpp('extern "C" void _init() { }\n'), "load-time-code", "_init"),
    "init-pragma": (cpp("#pragma init (boot)\nstatic void boot() { }\n"), "load-time-code", "pragma init"),
    # allocators and storages of the candidate's own
    "allocator-subclass": (cpp("struct Lazy : public c10::Allocator {\n    int x;\n};\n"), "allocator",
                           "subclass of `Allocator`"),
    "allocator-subclass-at": (cpp("class Lazy final : at::Allocator {\n};\n"), "allocator", "Allocator"),
    "allocator-override": (cpp("struct L {\n    c10::DataPtr allocate(size_t n) const { return {}; }\n};\n"),
                           "allocator", "DataPtr allocate"),
    "allocator-trailing-return": (cpp("struct L {\n    auto allocate(size_t n) const -> c10::DataPtr { return {}; }"
                                      "\n};\n"), "allocator", "-> c10::DataPtr"),
    "allocator-copy-data": (cpp("struct L {\n    void copy_data(void* d, const void* s, size_t n) const { }\n};\n"),
                            "allocator", "copy_data"),
    "set-allocator": (cpp("void f(c10::Allocator* a) { c10::SetAllocator(c10::DeviceType::CPU, a); }\n"),
                      "allocator", "SetAllocator"),
    "set-cpu-allocator": (cpp("void f(c10::Allocator* a) { c10::SetCPUAllocator(a); }\n"), "allocator",
                          "SetCPUAllocator"),
    "caching-allocator-internals": (cpp("void f(void* a) { c10::cuda::CUDACachingAllocator::allocator.store(a); }\n"),
                                    "allocator", "CUDACachingAllocator::allocator"),
    "cow": (cpp("void f(c10::Storage s) { auto c = c10::impl::cow::lazy_clone_storage(*s.unsafeGetStorageImpl()); }\n"),
            "allocator", "cow::"),
    "lazy-clone": (cpp("torch::Tensor f(torch::Tensor x) { return x._lazy_clone(); }\n"), "allocator", "_lazy_clone"),
    "data-ptr-deleter": (cpp("void f(void* p, void* ctx) {\n"
                             "    c10::DataPtr d(p, ctx, &release, c10::Device(c10::kCPU));\n}\n"), "allocator",
                         "`DataPtr` with a deleter"),
    "set-data-ptr": (cpp("void f(c10::Storage s, c10::DataPtr d) { s.set_data_ptr(std::move(d)); }\n"), "allocator",
                     "set_data_ptr"),
    "storage-impl-create": (cpp("void f() { c10::SetStorageImplCreate(c10::DeviceType::CPU, make); }\n"),
                            "allocator", "SetStorageImplCreate"),
    "tensor-impl-subclass": (cpp("struct Lazy : public c10::TensorImpl {\n};\n"), "allocator", "TensorImpl"),
    # page protection and signal handlers
    "mprotect": (cpp("void f(void* p, size_t n) { mprotect(p, n, 0); }\n"), "page-protection", "mprotect"),
    "mprotect-macro-alias": (cpp("#define MP mprotect\nvoid f(void* p, size_t n) { MP(p, n, 0); }\n"),
                             "page-protection", "mprotect"),
    "prot-none": (cpp("int f() { return PROT_NONE; }\n"), "page-protection", "PROT_NONE"),
    "madvise": (cpp("void f(void* p, size_t n) { madvise(p, n, 4); }\n"), "page-protection", "madvise"),
    "userfaultfd": (cpp("long f() { return syscall(__NR_userfaultfd, 0); }\n"), "page-protection", "userfaultfd"),
    "pkey": (cpp("int f() { return pkey_alloc(0, 0); }\n"), "page-protection", "pkey_alloc"),
    "sigaction": (cpp("void f(struct sigaction* sa) { sigaction(11, sa, nullptr); }\n"), "signal", "sigaction"),
    "signal-segv": (cpp("void h(int) { }\nvoid f() { signal(SIGSEGV, h); }\n"), "signal", "SIGSEGV"),
    "signal-number": (cpp("void h(int) { }\nvoid f() { signal(11, h); }\n"), "signal", "signal"),
    "signal-returned": (cpp("void h(int) { }\nauto f(int s) { return signal(s, h); }\n"), "signal", "signal"),
    "signal-std": (cpp("void h(int) { }\nvoid f() { std::signal(7, h); }\n"), "signal", "std::signal"),
    "signal-pointer": (cpp("void f() { auto p = &signal; }\n"), "signal", "signal"),
    "sigbus": (cpp("int f() { return SIGBUS; }\n"), "signal", "SIGBUS"),
    "sigsetjmp": (cpp("sigjmp_buf env;\nint f() { return sigsetjmp(env, 1); }\n"), "signal", "sigjmp_buf"),
    "setjmp": (cpp("jmp_buf env;\nvoid f() { if (setjmp(env) == 0) longjmp(env, 1); }\n"), "signal", "jmp_buf"),
    # symbols taken by name
    "dlsym": (cpp('void* f() { return dlsym(RTLD_DEFAULT, "cudaLaunchKernel"); }\n'), "symbol-hijack", "dlsym"),
    "dlvsym": (cpp('void* f(void* h) { return dlvsym(h, "cuLaunchKernel", "libcuda"); }\n'), "symbol-hijack",
               "dlvsym"),
    "rtld-next": (cpp("void* f() { return RTLD_NEXT; }\n"), "symbol-hijack", "RTLD_NEXT"),
    "libc-dlsym": (cpp('void* f(void* h) { return __libc_dlsym(h, "x"); }\n'), "symbol-hijack", "__libc_dlsym"),
    "got": (cpp("extern char _GLOBAL_OFFSET_TABLE_[];\n"), "symbol-hijack", "_GLOBAL_OFFSET_TABLE_"),
    "got-section": (cpp('const char* s = ".got.plt";\n'), "symbol-hijack", ".got.plt"),
    "phdr": (cpp("void f() { dl_iterate_phdr(cb, nullptr); }\n"), "symbol-hijack", "dl_iterate_phdr"),
    "elf-relocations": (cpp("void f(Elf64_Rela* r) { }\n"), "symbol-hijack", "Elf64_Rela"),
    "cu-get-proc-address": (cpp('void f(void** fn) { cuGetProcAddress("cuLaunchKernel", fn, 12000, 0); }\n'),
                            "symbol-hijack", "cuGetProcAddress"),
    "driver-entry-point": (cpp("void f(void** fn, cudaDriverEntryPointQueryResult* q) {\n"
                               '    cudaGetDriverEntryPoint("cuLaunchKernel", fn, cudaEnableDefault, q);\n}\n'),
                           "symbol-hijack", "cudaGetDriverEntryPoint"),
    "driver-entry-point-computed": (cpp("void f(const char* n, void** fn) {\n"
                                        "    cudaGetDriverEntryPoint(n, fn, cudaEnableDefault, nullptr);\n}\n"),
                                    "symbol-hijack", "cudaGetDriverEntryPoint"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_native_trick_is_refused_naming_it(name):
    source, check, construct = REFUSED[name]
    findings = [f for f in check_source(source) if f.check == check]
    assert findings, (name, [f.describe("model_new.py") for f in check_source(source)])
    reason = findings[0].describe("model_new.py")
    assert construct in reason, reason
    assert "\n" not in reason


BINDINGS = """#include <torch/extension.h>
namespace py = pybind11;
using namespace pybind11::literals;

struct Runner {
    explicit Runner(int n) : n(n) {}
    torch::Tensor run(torch::Tensor x) { return x; }
    int n;
};

torch::Tensor forward(torch::Tensor x, double scale) {
    py::gil_scoped_release release;
    return x * scale;
}

py::tuple both(torch::Tensor x) { return py::make_tuple(x, py::cast(1)); }
py::object nothing() { return py::none(); }
pybind11::object same(pybind11::object o) { pybind11::gil_scoped_acquire hold; return o; }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &forward, "forward (CUDA)", py::arg("x"), py::arg("scale") = 1.0,
          py::call_guard<py::gil_scoped_release>());
    m.def("forward2", &forward, pybind11::arg("x"), pybind11::arg("scale") = 1.0, "flag"_a = true);
    m.def("both", &both, py::return_value_policy::move);
    m.def("nothing", &nothing);
    m.def("same", &same);
    py::class_<Runner>(m, "Runner").def(py::init<int>()).def("run", &Runner::run);
    m.attr("BLOCK") = 256;
}
"""

HONEST_KERNEL = r"""#include <torch/extension.h>
#include <c10/cuda/CUDACachingAllocator.h>
#define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor")
#define KERNEL(T) scale_##T
// We never call PyObject_SetAttr, py::module_::import, mprotect, signal() or dlsym here, and
// no __attribute__((constructor)) or c10::Allocator subclass either: comments are not code.
constexpr float SIGMA = 1.5f;

struct Table {
    Table() { for (int i = 0; i < 16; ++i) v[i] = i * SIGMA; }
    float v[16];
};
static Table table;  // a global object with a constructor is honest

__device__ __forceinline__ float signal(float x) { return x * SIGMA; }
__device__ float signal(float x, float gain) { return x * gain; }
__device__ float eval(float x) { return x * x; }
static inline __attribute__((always_inline)) int my_attr(int a) { return a + 1; }

struct Stats { int attr_count = 0; };

__global__ void KERNEL(float)(const float* __restrict__ in, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float signal_strength = in[i];
        float sig = signal(signal_strength) + eval(in[i]) + signal(in[i], 2.f);
        out[i] = sig;
    }
}

torch::Tensor scale(torch::Tensor x) {
    CHECK_CUDA(x);
    Stats stats;
    stats.attr_count = my_attr(stats.attr_count);
    cudaFuncAttributes attr;
    cudaFuncGetAttributes(&attr, KERNEL(float));
    int threads = attr.maxThreadsPerBlock < 256 ? attr.maxThreadsPerBlock : 256;
    TORCH_CHECK(threads > 0, __func__, ": mprotect? signal(SIGSEGV)? dlsym? .attr(x)? none of that here");
    auto out = torch::empty_like(x);
    const int64_t n = x.numel();
    void* ws = c10::cuda::CUDACachingAllocator::raw_alloc(n * sizeof(float));
    auto* allocator = c10::cuda::CUDACachingAllocator::get();
    auto extra = allocator->allocate(n * sizeof(float));
    auto storage = c10::make_intrusive<c10::StorageImpl>(
        c10::StorageImpl::use_byte_size_t(), n * 4, allocator->allocate(n * 4), allocator, false);
    auto view = at::from_blob(ws, {n}, [](void* p) { c10::cuda::CUDACachingAllocator::raw_delete(p); },
                              x.options());
    auto cpu = at::getCPUAllocator()->allocate(16);
    KERNEL(float)<<<(n + threads - 1) / threads, threads, 0,
                    at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), out.data_ptr<float>(), (int)n);
    return out;
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*,
                                 CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                 CUtensorMapFloatOOBfill);
EncodeTiled encoder() {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult qres;
    cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &qres);
    return reinterpret_cast<EncodeTiled>(fn);
}

void gil_free(torch::Tensor x) {
    Py_BEGIN_ALLOW_THREADS
    x.zero_();
    Py_END_ALLOW_THREADS
    PyThreadState* state = PyEval_SaveThread();
    PyEval_RestoreThread(state);
}
"""

ACCEPTED = {
    "bindings": cpp(BINDINGS),
    "kernel": cpp(HONEST_KERNEL),
    "prose": "MSG = 'no mprotect here; the signal is clean, its attr and eval are set at import'\n",
    "python-getattr": "import torch\nclass ModelNew(torch.nn.Module):\n"
                      "    def forward(self, x):\n        return getattr(torch, 'relu')(x)\n",
    # Python in a string shares names with the rules (getattr, signal, __dict__): it is not C++
    "python-in-a-string": 'PROBE = """import json, signal\nmods = {}\nfor n in ("torch",):\n'
                          '    mods[n] = getattr(object, "__doc__", None)\n    state = holder.__dict__\n'
                          'signal.signal(signal.SIGTERM, handler)\nprint(json.dumps({"m": mods}))\n"""\n',
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_honest_look_alike_passes(name):
    findings = check_source(ACCEPTED[name])
    assert findings == [], [f.describe("model_new.py") for f in findings]


def test_the_finding_names_the_line_of_the_construct():
    source = cpp("#include <torch/extension.h>\n\nvoid f(py::object o) {\n    int a = 1;\n"
                 '    auto t = pybind11::module_::import("time");\n}\n')
    [finding] = check_source(source)
    assert (finding.check, finding.line) == (PY, 5)
    assert finding.describe("model_new.py") == (
        "static check [python-from-cpp]: C++/CUDA source reaches Python objects from C++ through pybind11 "
        "(imports, eval, attributes) (`pybind11::module_::import`) (model_new.py:5)")


def test_every_honest_source_passes():
    """The honest corpus, the examples' solutions and the test library's kernels."""
    from sources import TESTLIB_CPP

    sources = sorted((ROOT / "tests" / "honest").glob("*.py")) + sorted((ROOT / "examples").glob("*/solution_*.py"))
    assert len(sources) >= 14
    for path in sources:
        findings = check_source(path.read_text(), reference_stems={"scale_add", "model"})
        assert findings == [], [f.describe(path.name) for f in findings]
    assert check_source(cpp(TESTLIB_CPP)) == []
