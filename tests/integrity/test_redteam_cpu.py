"""Red team, cpu target: every cheating candidate is rejected with a reason naming its trick,
and the honest candidates for the same problems are accepted (the guard refuses selectively).

Working extensions come from tests/sources.py:TESTLIB_CPP (one shared build).
"""

import pytest
from sources import candidate_source

HONEST = candidate_source("return _ext.scale_add_relu(x, y, self.scale)")

# Caught by the static checks, before anything runs.
STATIC_CHEATS = {
    "other-stream": ("s = torch.cuda.Stream()\nreturn _ext.scale_add_relu(x, y, self.scale)", "[stream]"),
    "cuda-graph-replay": ("g = torch.cuda.CUDAGraph()\nreturn _ext.scale_add_relu(x, y, self.scale)", "[stream]"),
    "thread": ("import threading\nreturn _ext.scale_add_relu(x, y, self.scale)", "[thread]"),
    "ctypes": ("import ctypes\nreturn _ext.scale_add_relu(x, y, self.scale)", "[ctypes]"),
    "timer-patch": ("import time\ntime.perf_counter = lambda: 0.0\nreturn _ext.scale_add_relu(x, y, self.scale)",
                    "[monkeypatch]"),
    "sys-modules": ("import sys\nsys.modules['time'] = None\nreturn _ext.scale_add_relu(x, y, self.scale)",
                    "[monkeypatch]"),
    "frame-walk": ("import sys\nf = sys._getframe(1).f_locals\nreturn _ext.scale_add_relu(x, y, self.scale)",
                   "[introspection]"),
    "gc-hunt": ("import gc\nobjs = gc.get_objects()\nreturn _ext.scale_add_relu(x, y, self.scale)",
                "[introspection]"),
    "import-reference": ("from scale_add import Model\nreturn Model(self.scale)(x, y)", "[reference-access]"),
    "open-reference": ("src = open('scale_add.py').read()\nreturn _ext.scale_add_relu(x, y, self.scale)",
                       "[file-io]"),
    "try-fallback": ("try:\n    return _ext.scale_add_relu(x, y, self.scale)\nexcept Exception:\n"
                     "    return torch.relu(x * self.scale + y)", "[fallback]"),
    "global-cache": ("global _LAST\n_LAST = _ext.scale_add_relu(x, y, self.scale)\nreturn _LAST", "[state]"),
    "file-carry": ("torch.save(x, '/tmp/kcoder_carry.pt')\nreturn _ext.scale_add_relu(x, y, self.scale)",
                   "[file-io]"),
    "torch-compile": ("return torch.compile(lambda a, b: torch.relu(a * self.scale + b))(x, y)",
                      "[torch-compiler]"),
    "tf32-switch": ("torch.backends.cuda.matmul.allow_tf32 = True\nreturn _ext.scale_add_relu(x, y, self.scale)",
                    "[precision]"),
    "fewer-baseline-threads": ("torch.set_num_threads(1)\nreturn _ext.scale_add_relu(x, y, self.scale)",
                               "[thread]"),
    "guard-detection": ("if torch._C._is_torch_function_mode_enabled():\n"
                        "    return _ext.scale_add_relu(x, y, self.scale)\nreturn torch.relu(x * self.scale + y)",
                        "[guard-evasion]"),
    "dynamic-code": ("return eval('torch.relu(x * self.scale + y)')", "[dynamic-code]"),
}

# C++ tricks, also static: the source text is checked before it is built.
CPP_CHEATS = {
    "cpp-thread": ("#include <thread>\nvoid bg() { std::thread t([]{}); t.join(); }", "[thread]"),
    "cpp-cublas": ("void g() { cublasSgemm(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0); }", "[library-gemm]"),
    "cpp-stream": ("void s() { auto st = c10::cuda::getStreamFromPool(); }", "[stream]"),
    "cpp-native-kernel": ("at::Tensor f(at::Tensor a) { return at::native::relu(a); }", "[guard-evasion]"),
    "cpp-static-cache": ("static torch::Tensor cached;", "[state]"),
    "cpp-static-map": ("static std::unordered_map<int64_t, torch::Tensor> memo;", "[state]"),
    "cpp-python-callback": ("void p() { py::module_::import(\"torch\"); }", "[python-from-cpp]"),
    # issue 40: the clock's __code__ replaced through the pybind11:: spelling, from a load-time
    # constructor; lazy outputs from an allocator of the candidate's own; faults turned into work
    "cpp-code-swap": ("__attribute__((constructor)) static void swap() {\n"
                      "    auto f = pybind11::module_::import(\"time\").attr(\"perf_counter\");\n}",
                      "[load-time-code]"),
    "cpp-pybind11-code": ("void swap(pybind11::object f, pybind11::object g) {\n"
                          "    pybind11::setattr(f, \"__code__\", g);\n}", "[python-from-cpp]"),
    "cpp-lazy-allocator": ("struct Lazy final : public c10::Allocator {\n"
                           "    void copy_data(void* d, const void* s, std::size_t n) const override {}\n};",
                           "[allocator]"),
    "cpp-page-trap": ("#include <sys/mman.h>\nvoid trap(void* p, size_t n) { mprotect(p, n, PROT_NONE); }",
                      "[page-protection]"),
    "cpp-driver-by-name": ("void* f() { void* fn; cuGetProcAddress(\"cuLaunchKernel\", &fn, 12000, 0); return fn; }",
                           "[symbol-hijack]"),
}


@pytest.mark.parametrize("name", sorted(STATIC_CHEATS))
def test_static_cheat_rejected(evaluate_candidate, name):
    body, expected = STATIC_CHEATS[name]
    verdict = evaluate_candidate(candidate_source(body))
    assert verdict.stage == "static" and not verdict.correct and verdict.reward == -1
    assert expected in verdict.reason, verdict.reason


@pytest.mark.parametrize("name", sorted(CPP_CHEATS))
def test_cpp_cheat_rejected(evaluate_candidate, name):
    extra, expected = CPP_CHEATS[name]
    source = candidate_source("return _ext.scale_add_relu(x, y, self.scale)",
                              header=f"EXTRA = {extra!r}\n")
    verdict = evaluate_candidate(source)
    assert verdict.stage == "static" and expected in verdict.reason, verdict.reason


def test_static_checks_accept_the_honest_candidate():
    from kcoder.evaluate.static import check_source

    assert check_source(HONEST, reference_stems={"scale_add"}) == []
    # static helper functions and streams taken from torch are honest C++
    helpers = ("static torch::Tensor run(torch::Tensor x) { return x; }\n"
               "static inline int blocks(int n) { return n / 256; }\n"
               "auto stream = at::cuda::getCurrentCUDAStream();\n")
    assert check_source(f"CPP = {helpers!r}\n") == []


def test_every_example_solution_passes_static_checks():
    from helpers import ROOT

    from kcoder.evaluate.static import check_source

    solutions = sorted((ROOT / "examples").glob("*/solution_*.py"))
    assert len(solutions) >= 8
    for path in solutions:
        assert check_source(path.read_text(), reference_stems={"model"}) == [], path


# Caught while running: the guard, verification and the timed-call checks.
RUNTIME_CHEATS = {
    "python-torch-fallback": ("return torch.relu(x * self.scale + y)", "verify",
                              "fallback refused: torch op `torch.Tensor.mul`"),
    "functional-fallback": ("import torch.nn.functional as F\nreturn F.relu(_ext.no_relu(x, y, self.scale))",
                            "verify", "fallback refused: torch op `torch.nn.functional.relu`"),
    "aten-from-cpp": ("return _ext.aten_fallback(x, y, self.scale)", "verify", "called from C++ extension code"),
    "torch-ops-direct": ("return torch.ops.aten.relu.default(_ext.no_relu(x, y, self.scale))", "verify",
                         "fallback refused: torch op `aten.relu"),
    "numpy-round-trip": ("import numpy as np\nreturn torch.from_numpy(np.maximum(x.numpy() * self.scale"
                         " + y.numpy(), 0))", "verify", "`torch.Tensor.numpy`"),
    "copy-fallback": ("out = torch.empty_like(x)\nout.copy_(_ext.scale_add_relu(x, y, self.scale))\nreturn out",
                      "verify", "`torch.Tensor.copy_`"),
    "unwritten-output": ("return _ext.skip_last(x, y, self.scale)", "verify",
                         "NaN positions differ from the reference (1 unexpected"),
    "modifies-inputs": ("return _ext.in_place(x, y, self.scale)", "verify", "modified its inputs"),
    "zeros": ("return _ext.zeros_out(x, y, self.scale)", "verify", "wrong answer"),
    "returns-input-alias": ("out = _ext.scale_add_relu(x, y, self.scale)\nreturn x", "verify",
                            "an output aliases an input"),
    "same-output-object": ("if self.last is None:\n    self.last = _ext.scale_add_relu(x, y, self.scale)\n"
                           "return self.last", "verify", "reuses an earlier call's output"),
    "parameter-subclass-output": ("return nn.Parameter(_ext.scale_add_relu(x, y, self.scale), requires_grad=False)",
                                  "verify", "plain torch.Tensor"),
    "stale-after-verification": ("self.calls += 1\nif self.calls <= 6 or self.last is None:\n"
                                 "    self.last = _ext.scale_add_relu(x, y, self.scale)\n"
                                 "    return self.last\nreturn self.last", "timing",
                                 "gave a wrong answer for its own inputs"),
    "replay-first-timed-answer": ("self.calls += 1\nif self.calls == 7:\n"
                                  "    self.keep = _ext.scale_add_relu(x, y, self.scale)\n"
                                  "if self.calls > 7:\n    return self.keep.view_as(self.keep)\n"
                                  "return _ext.scale_add_relu(x, y, self.scale)", "timing",
                                  "gave a wrong answer for its own inputs"),
    "fallback-when-timed": ("self.calls += 1\nif self.calls > 7:\n    return torch.relu(x * self.scale + y)\n"
                            "return _ext.scale_add_relu(x, y, self.scale)", "timing", "audit call"),
    "patch-timer-via-dict": ("import time\nns = time.__dict__\nns['perf_counter'] = lambda: 0.0\n"
                             "return _ext.scale_add_relu(x, y, self.scale)", "verify",
                             "timing or harness functions were replaced"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RUNTIME_CHEATS))
def test_runtime_cheat_rejected(evaluate_candidate, name):
    body, stage, expected = RUNTIME_CHEATS[name]
    init = "self.last = None\nself.calls = 0\nself.keep = None"
    verdict = evaluate_candidate(candidate_source(body, init=init), audit_every=1, min_rounds=3)
    assert not verdict.correct and verdict.reward == -1
    assert verdict.stage == stage, verdict.reason
    assert expected in verdict.reason, verdict.reason


@pytest.mark.slow
def test_honest_candidate_accepted_with_same_options(evaluate_candidate):
    init = "self.last = None\nself.calls = 0\nself.keep = None"
    verdict = evaluate_candidate(candidate_source("return _ext.scale_add_relu(x, y, self.scale)", init=init),
                                 audit_every=1, min_rounds=3)
    assert verdict.correct and verdict.stage == "done" and verdict.reward >= 1, verdict.reason


@pytest.mark.slow
def test_precision_policy(evaluate_candidate):
    body = "return _ext.bf16_inputs(x, y, self.scale)"
    strict = evaluate_candidate(candidate_source(body), stop_after="verify")
    assert not strict.correct and "outside tolerance" in strict.reason
    relaxed = evaluate_candidate(candidate_source(body), stop_after="verify", precision="relaxed")
    assert relaxed.correct and relaxed.precision == "relaxed", relaxed.reason


GEMM_CANDIDATE = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.mm(a, b)
"""


def test_gemm_library_only_when_allowed(evaluate_candidate):
    refused = evaluate_candidate(GEMM_CANDIDATE, problem="matmul_small.py", stop_after="verify")
    assert not refused.correct and "`torch.mm`" in refused.reason
    allowed = evaluate_candidate(GEMM_CANDIDATE, problem="matmul_small.py", stop_after="verify",
                                 allow=["gemm"])
    assert allowed.correct, allowed.reason
    assert allowed.allow == ["gemm"]


ZEROS_FOR_TINY = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)
"""

CONSTANT_ANSWER = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.full_like(x, 3.0)
"""


def test_zeros_rejected_for_tiny_outputs(evaluate_candidate):
    verdict = evaluate_candidate(ZEROS_FOR_TINY, problem="tiny_output.py", stop_after="verify")
    assert not verdict.correct and "wrong answer" in verdict.reason


def test_degenerate_problem_is_flagged(evaluate_candidate):
    verdict = evaluate_candidate(CONSTANT_ANSWER, problem="constant_output.py", stop_after="verify")
    assert verdict.correct, verdict.reason
    assert any("degenerate problem" in note for note in verdict.notes)
    # and a constant answer to a non-constant problem never passes:
    wrong = evaluate_candidate(CONSTANT_ANSWER, problem="tiny_output.py", stop_after="verify")
    assert not wrong.correct
