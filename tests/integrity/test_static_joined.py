"""Static rules read what is compiled (issue 45, item 7).

- An attribute reached by a name given as a string (`getattr(f, "__closure__")`, hasattr,
  setattr, delattr, `object.__getattribute__`) is judged as `f.__closure__` is, and any
  dunder name given that way is refused; so is a name folded from constants
  (`"__clo" + "sure__"`, `"_" * 2 + "code__"`, f-strings, joins, `%`, `.format`).
- A native name split across Python constants is read whole: by the static checks where the
  file builds it from constants, and by kcoder's build service (in the judge's process) on the
  text `load_inline` compiles, whatever built it at run time. A finding there is the build's
  failure, naming the rule and the snippet.
- Honest code that joins or formats its sources (the examples' solutions, the honest corpus,
  a `.format`/f-string/join-built kernel) passes both.

Static checks and the build service's check only (no compiler runs); one evaluation starts a
candidate process whose request the service refuses before anything is built.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from kcoder.evaluate.buildservice import BuildService
from kcoder.evaluate.static import check_source

ROOT = Path(__file__).resolve().parents[2]


def reasons(source: str) -> list[str]:
    return [f.describe("model_new.py") for f in check_source(source)]


def fn(body: str) -> str:
    return f"def probe(obj):\n    {body}\n"


# (source, the attribute the reason must name); each refused on line 2 of model_new.py
BY_NAME = {
    "getattr-closure": (fn("return getattr(obj, '__closure__')"), "__closure__"),
    "getattr-code-default": (fn("return getattr(obj, '__code__', None)"), "__code__"),
    "getattr-globals": (fn('return getattr(obj, "__globals__")'), "__globals__"),
    "getattr-dict": (fn("return getattr(obj, '__dict__')"), "__dict__"),
    "getattr-func": (fn("return getattr(obj, '__func__')"), "__func__"),
    "getattr-self": (fn("return getattr(obj, '__self__')"), "__self__"),
    "hasattr-closure": (fn("return hasattr(obj, '__closure__')"), "__closure__"),
    "delattr-dict": (fn("delattr(obj, '__dict__')"), "__dict__"),
    "setattr-code": (fn("setattr(obj, '__code__', None)"), "__code__"),
    "setattr-self-class": ("class M:\n    def __init__(self):\n        setattr(self, '__class__', int)\n",
                           "__class__"),
    "getattribute": (fn("return object.__getattribute__(obj, '__closure__')"), "__closure__"),
    "getattribute-method": (fn("return obj.__getattribute__('__globals__')"), "__globals__"),
    "getattr-wrapped": (fn("return getattr(obj, '__wrapped__')"), "__wrapped__"),
}

# Names folded from constants: (source, the attribute the reason must name)
FOLDED = {
    "concat": (fn("return getattr(obj, '__clo' + 'sure__')"), "__closure__"),
    "repeat": (fn("return getattr(obj, '_' * 2 + 'code__')"), "__code__"),
    "f-string": ("A = '__glo'\ndef probe(obj):\n    return getattr(obj, f'{A}bals__')\n", "__globals__"),
    "join": (fn("return getattr(obj, ''.join(['__co', 'de__']))"), "__code__"),
    "format": (fn("return getattr(obj, '{}{}'.format('__di', 'ct__'))"), "__dict__"),
    "percent": (fn("return getattr(obj, '%s%s' % ('__fu', 'nc__'))"), "__func__"),
    "reversed": (fn("return getattr(obj, '__erusolc__'[::-1])"), "__closure__"),
    "name-bound-once": ("N = '__se' + 'lf__'\ndef probe(obj):\n    return getattr(obj, N)\n", "__self__"),
    "string-alone": ("NAME = '__co' + 'de__'\n", "__code__"),
}


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_attribute_by_literal_dunder_name_is_refused(name):
    source, attr = BY_NAME[name]
    found = reasons(source)
    assert found, name
    assert any(r.startswith("static check [introspection]:") and (f"`{attr}`" in r or f"'{attr}'" in r)
               for r in found), found
    assert all("model_new.py:" in r for r in found), found
    line = 3 if name == "setattr-self-class" else 2
    assert any(r.endswith(f"(model_new.py:{line})") for r in found), found


def test_getattr_is_refused_like_the_plain_attribute():
    plain, by_name = reasons(fn("return obj.__closure__")), reasons(fn("return getattr(obj, '__closure__')"))
    assert plain == ["static check [introspection]: walks frames or function internals (`.__closure__`) "
                     "(model_new.py:2)"]
    assert by_name == ["static check [introspection]: walks frames or function internals "
                       "(`getattr(..., '__closure__')`) (model_new.py:2)"]


@pytest.mark.parametrize("name", sorted(FOLDED))
def test_dunder_folded_from_constants_is_refused(name):
    source, attr = FOLDED[name]
    found = reasons(source)
    assert any(r.startswith("static check [introspection]:") and attr in r for r in found), found


def test_getattr_passed_around_is_refused():
    assert reasons("g = getattr\n") == ["static check [introspection]: passes `getattr` around (the attribute "
                                        "names it reaches cannot be checked) (model_new.py:1)"]


def test_honest_getattr_and_dunders_pass():
    source = ("import torch\nclass ModelNew(torch.nn.Module):\n    def __init__(self):\n"
              "        super().__init__()\n        setattr(self, 'w0', torch.nn.Parameter(torch.ones(1)))\n"
              "    def forward(self, x):\n        return getattr(torch, 're' + 'lu')(x * getattr(self, 'w0'))\n"
              "if __name__ == '__main__':\n    print(ModelNew.__name__, type(ModelNew).__qualname__)\n"
              "def size(x):\n    return len(x) if hasattr(x, '__len__') else getattr(x, '__name__', '')\n")
    assert reasons(source) == []


# -- native names split across constants ----------------------------------------------------------------
def test_native_name_joined_from_constants_is_refused_statically():
    source = ("HEAD = 'void f(cudaStream_t* s) {\\n    cudaStre'\n"
              "CPP = HEAD + 'amCreate(s);\\n}\\n'\n"
              "CUDA = f'void g() {{ {\"std::thr\"}ead t; }}'\n")
    found = reasons(source)
    assert any(r.startswith("static check [stream]:") and "`cudaStreamCreate`" in r for r in found), found
    assert any(r.startswith("static check [thread]:") and "`std::thread`" in r for r in found), found


def test_ways_past_the_build_service_are_refused():
    """torch's own load_inline under kcoder's wrapper, and a `with` that swallows the build's
    failure (to build again some other way)."""
    assert reasons("from torch.utils.cpp_extension import load_inline\nbuild = load_inline.__wrapped__\n") == [
        "static check [introspection]: walks frames or function internals (`.__wrapped__`) (model_new.py:2)"]
    swallow = "class Quiet:\n    def __enter__(self):\n        return self\n\n    def __exit__(self, *exc):\n" \
              "        return True\n"
    assert reasons(swallow) == ["static check [fallback]: defines __exit__ that can return true (swallows "
                                "exceptions, as try/except does) (model_new.py:5)"]
    assert reasons(swallow.replace("return True", "return False")) == []


def _service(tmp_path: Path, allow=None, static_checks=None) -> BuildService:
    return BuildService(tmp_path / "work", tmp_path / "requests", "none", allow=allow,
                        static_checks=static_checks)


def _ask(service: BuildService, params: dict) -> tuple[dict, str]:
    name = "1-joined"
    (service.requests / f"{name}.json").write_text(json.dumps({"params": params, "fast": True, "arch": ""}))
    service.poll()
    return json.loads((service.replies / f"{name}.json").read_text()), name


def _joined_at_run_time(*parts: str) -> str:
    return "".join(reversed(parts))  # what no static folding reads


def test_build_service_refuses_a_native_name_joined_at_run_time(tmp_path):
    pieces = ("amCreate(&s);\n    return x;\n}\n",
              "torch::Tensor f(torch::Tensor x) {\n    cudaStream_t s;\n    cudaStre")
    assert check_source("".join(f"P{i} = {p!r}\n" for i, p in enumerate(pieces))) == []  # each piece passes
    kernel = _joined_at_run_time(*pieces)
    service = _service(tmp_path)
    reply, name = _ask(service, {"name": "joined", "cpp_sources": ["#include <cstdint>", kernel],
                                 "functions": ["f"]})
    assert "refused" not in reply  # a refusal would let the candidate's process build it itself
    assert reply["error"] == ("static check [stream]: C++/CUDA source creates or switches CUDA streams/graphs/events "
                              "(work off the current stream escapes the timer) (`cudaStreamCreate`) "
                              "(load_inline cpp_sources:4, the text as compiled)")
    assert service.jobs[name] is None  # nothing was built
    assert service.static_findings == [reply["error"]]  # kept in the judge's process


@pytest.mark.parametrize("params, check, where", [
    ({"cpp_sources": "void f();", "cuda_sources": "__global__ void k() {}\nvoid g() { MAKE(nullptr); }\n",
      "extra_cuda_cflags": ["-O3", "-DMAKE=cudaStreamCreate"]}, "stream", "extra_cuda_cflags"),
    ({"cpp_sources": "void f();", "cuda_sources": "void g() { SPAWN(); }\n",
      "extra_cuda_cflags": ["-Xcompiler", "-DSPAWN=fork"]}, "process", "extra_cuda_cflags"),
    ({"cpp_sources": "void f() {}", "functions": {"f": 'doc"); int fd = ::open("x", 1); //'}},
     "file-io", "functions"),
    ({"cpp_sources": "void f() {}", "extra_include_paths": ["/usr/include"],
      "cuda_sources": ["void g() { std::thr\\", "ead t; }"]}, "thread", "cuda_sources:1"),  # a line splice
])
def test_build_service_reads_flags_bindings_and_refusable_requests(tmp_path, params, check, where):
    reply, _ = _ask(_service(tmp_path), params)
    assert reply["error"].startswith(f"static check [{check}]:"), reply
    assert f"(load_inline {where}" in reply["error"], reply


def test_build_service_follows_the_evaluation_options(tmp_path):
    params = {"cpp_sources": _joined_at_run_time("Sgemm(h);", "void f() { cublas")}
    assert [f.check for f in _service(tmp_path).source_findings(params)] == ["library-gemm"]
    assert _service(tmp_path, allow=["gemm"]).source_findings(params) == []
    assert _service(tmp_path, static_checks=False).source_findings(params) == []
    # Unset: the job file the judge writes beside the candidate's box (spawn.py) says.
    service = _service(tmp_path)
    (service.work / "handoff").mkdir()
    (service.work / "handoff" / "candidate.json").write_text(json.dumps(
        {"options": {"allow": ["gemm"], "static_checks": True}}))
    assert service.source_findings(params) == []


# -- honest sources --------------------------------------------------------------------------------------
HONEST_JOINED = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

THREADS = 256
HEADER = "#include <torch/extension.h>\\n#include <vector>\\n"
KERNEL = """
torch::Tensor scale_add_relu(torch::Tensor x, torch::Tensor y, double s) {
    auto out = torch::empty_like(x);
    const float* a = x.data_ptr<float>();
    const float* b = y.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); i += BLOCK) {
        for (int64_t j = i; j < i + BLOCK && j < x.numel(); ++j) {
            float v = a[j] * (float)s + b[j];
            o[j] = v > 0.f ? v : 0.f;
        }
    }
    return out;
}
"""


def _configured(source, **config):
    return "".join(f"#define {k} {v}\\n" for k, v in config.items()) + source


CPP = HEADER + "// {} threads\\n".format(THREADS) + f"constexpr int kThreads = {THREADS};\\n" + \\
    _configured(KERNEL, BLOCK=4 * THREADS)
_ext = load_inline(name="honest_joined", cpp_sources=[CPP], functions=["scale_add_relu"],
                   extra_cflags=["-O3", f"-DTHREADS={THREADS}"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return _ext.scale_add_relu(x, y, self.scale)
'''


def _load_inline_calls(path: Path, monkeypatch) -> list[dict]:
    """The load_inline arguments a candidate file passes, as its own code builds them."""
    import torch.utils.cpp_extension as cpp_extension

    calls: list[dict] = []
    monkeypatch.setattr(cpp_extension, "load_inline", lambda **kw: calls.append(kw) or types.SimpleNamespace())
    module = types.ModuleType(f"candidate_{abs(hash(path))}")
    module.__file__ = str(path)
    monkeypatch.setitem(sys.modules, module.__name__, module)  # dataclasses look their module up
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    return calls


def test_honest_sources_built_by_joins_and_formats_pass(tmp_path, monkeypatch):
    path = tmp_path / "model_new.py"
    path.write_text(HONEST_JOINED)
    assert reasons(HONEST_JOINED) == []
    [params] = _load_inline_calls(path, monkeypatch)
    assert "#define BLOCK 1024" in params["cpp_sources"][0]
    service = _service(tmp_path)
    assert service.source_findings(params) == []


def test_every_honest_candidate_passes_the_build_check(tmp_path, monkeypatch):
    """The examples' solutions and the honest corpus: the strings they hand to load_inline."""
    paths = sorted((ROOT / "examples").glob("*/solution_*.py")) + sorted((ROOT / "tests" / "honest").glob("*.py"))
    service = _service(tmp_path)
    checked = 0
    for path in paths:
        for params in _load_inline_calls(path, monkeypatch):
            found = [f.describe() for f in service.source_findings(params)]
            assert found == [], (path.name, found)
            checked += 1
    assert checked >= 12


# -- end to end: the candidate's own process asks, the judge's build service refuses -----------------
JOINED_CANDIDATE = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline


def _joined(*parts):
    return "".join(parts)


CPP = _joined("torch::Tensor scale_add_relu(torch::Tensor x, torch::Tensor y, double s) {\\n"
              "    cudaStream_t stream;\\n    cudaStre", "amCreate(&stream);\\n    return x;\\n}\\n")
_ext = load_inline(name="joined_stream", cpp_sources=CPP, functions=["scale_add_relu"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return _ext.scale_add_relu(x, y, self.scale)
'''


def test_a_name_joined_at_run_time_fails_the_build(evaluate_candidate):
    assert reasons(JOINED_CANDIDATE) == []  # the file alone shows no construct
    verdict = evaluate_candidate(JOINED_CANDIDATE, stop_after="build")
    assert not verdict.correct and verdict.stage == "build", (verdict.stage, verdict.reason)
    assert verdict.reason.startswith("static check [stream]:"), verdict.reason
    assert "`cudaStreamCreate`" in verdict.reason and "load_inline cpp_sources:3" in verdict.reason, verdict.reason
