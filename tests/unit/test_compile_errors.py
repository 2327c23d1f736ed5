"""Compile errors point at the cause: the verdict's reason is the first compiler diagnostic,
located in the candidate's own source strings, and a genuine error costs one compile (the
faster build is retried with the full torch header only for errors a lighter header can
cause). The parsing is tested on recorded compiler output; the slow tests build for real."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import PROBLEMS, fast_options

from kcoder.build import diagnostics, fastbuild
from kcoder.build.diagnostics import SourceMap

NVCC = "/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else shutil.which("nvcc")
BUILD = "/tmp/cache/build/ext-0123456789abcdef"

# What torch raises for a failed build (shortened command lines), light header form.
LIGHT_SYNTAX_ERROR = f"""Error building extension 'ext': [1/2] c++ -MMD -DX -c {BUILD}/kcoder_light_main.cpp -o main.o
FAILED: [code=1] main.o
c++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=ext -isystem /x -c {BUILD}/kcoder_light_main.cpp -o main.o
{BUILD}/kcoder_light_main.cpp: In function ‘at::Tensor f(at::Tensor)’:
{BUILD}/kcoder_light_main.cpp:6:18: error: expected primary-expression before ‘)’ token
    6 |     int k = (3 + ) + undeclared_thing;
      |                  ^
{BUILD}/kcoder_light_main.cpp:6:22: error: ‘undeclared_thing’ was not declared in this scope
    6 |     int k = (3 + ) + undeclared_thing;
      |                      ^~~~~~~~~~~~~~~~
ninja: build stopped: subcommand failed.
"""


def _unit(*errors: str) -> list[str]:
    return [f"kcoder_light_main.cpp:{i + 5}:3: error: {e}" for i, e in enumerate(errors)]


def test_reason_is_the_first_diagnostic_in_the_candidates_source_not_torchs_banner():
    reason = diagnostics.first_diagnostic(LIGHT_SYNTAX_ERROR, Path(BUILD), SourceMap([8]))
    assert reason == "cpp_sources:5:18: error: expected primary-expression before ‘)’ token"
    log = diagnostics.trim_compiler_output(LIGHT_SYNTAX_ERROR, Path(BUILD), sources=SourceMap([8]))
    assert log.splitlines()[:2] == [reason, "    5 |     int k = (3 + ) + undeclared_thing;"]
    assert "-isystem" not in log and "Error building" not in log


@pytest.mark.parametrize("line, expected", [
    ("main.cpp:7:3: error: x", "cpp_sources:6:3: error: x"),
    ("kcoder_light_main.cpp:7:3: error: x", "cpp_sources:6:3: error: x"),
    ("cuda.cu(12): error: identifier \"y\" is undefined", "cuda_sources:9: error: identifier \"y\" is undefined"),
    ("kcoder_fast.cu:12:5: error: x", "cuda_sources:9:5: error: x"),
    ("In file included from main.cpp:2:", "In file included from cpp_sources:1:"),
    ("/usr/include/torch/main.cpp.h:3: error: x", "/usr/include/torch/main.cpp.h:3: error: x"),
])
def test_locations_map_to_the_candidates_source_strings(line, expected):
    assert diagnostics.map_locations(line) == expected


def test_source_map_follows_load_inline_several_strings_and_no_implicit_headers():
    params = {"cpp_sources": ["int a;\nint b;", "int c;"], "cuda_sources": "x\ny\nz"}
    smap = SourceMap.from_params(params)
    assert diagnostics.map_locations("main.cpp:3:1: error: e", smap) == "cpp_sources[0]:2:1: error: e"
    assert diagnostics.map_locations("main.cpp:4:1: error: e", smap) == "cpp_sources[1]:1:1: error: e"
    assert diagnostics.map_locations("main.cpp:9:1: error: e", smap).startswith(
        "the binding load_inline generates for `functions`: error")
    assert diagnostics.map_locations("cuda.cu(5): error: e", smap) == "cuda_sources:2: error: e"
    bare = SourceMap.from_params({**params, "no_implicit_headers": True})
    assert diagnostics.map_locations("cuda.cu(5): error: e", bare) == "cuda_sources:5: error: e"


@pytest.mark.parametrize("errors, names, retry", [
    # the source's own errors: a retry with a fuller header cannot fix them
    (["expected primary-expression before ‘)’ token"], None, False),
    (["expected ‘;’ before ‘return’"], None, False),
    (["invalid conversion from ‘int’ to ‘float*’ [-fpermissive]"], None, False),
    # names a missing header can declare
    (["‘queue’ is not a member of ‘std’"], None, True),
    (["‘queue’ is not a member of ‘std’"], {"queue", "std"}, True),
    (["‘nn’ is not a member of ‘torch’"], {"nn"}, True),
    (["‘Sequential’ does not name a type"], {"Sequential"}, True),
    (["invalid use of incomplete type ‘struct torch::nn::Module’"], {"Module"}, True),
    (["expected primary-expression before ‘int’", "‘foo’ was not declared in this scope"], {"foo"}, True),
    # names the full header never spells: declared by neither header
    (["‘undeclared_thing’ was not declared in this scope"], {"queue"}, False),
    (["‘emtpy_like’ is not a member of ‘torch’; did you mean ‘empty_like’?"], {"torch", "empty_like"}, False),
    (["‘class at::Tensor’ has no member named ‘sizez’"], {"at", "Tensor", "class"}, False),
    (["‘class at::Tensor’ has no member named ‘size’"], {"size"}, True),
])
def test_retry_only_for_errors_a_missing_declaration_can_cause(errors, names, retry):
    assert diagnostics.could_be_missing_header(_unit(*errors), names) is retry


@pytest.mark.parametrize("lines, retry", [
    (['kcoder_fast.cu(4): error: expected a ";"'], False),
    (['kcoder_fast.cu(4): error: identifier "CUDA_KERNEL_ASSERT" is undefined'], True),
    (['kcoder_fast.cu(4): error: namespace "std" has no member "vector"'], True),
    (['kcoder_fast.cu(4): error: name followed by "::" must be a class or namespace name'], True),
    # outside the candidate's file (a header, the compiler itself): never the source's own fault
    (["/usr/include/c10/util/Half.h:12:3: error: something"], True),
    (["cc1plus: fatal error: kcoder_pch.h: No such file or directory"], True),
    (["Killed signal terminated program cc1plus"], True),
])
def test_retry_decision_for_cuda_units_and_foreign_errors(lines, retry):
    assert diagnostics.could_be_missing_header(lines) is retry


def test_forms_to_retry_reads_each_failed_unit(tmp_path, monkeypatch):
    notes = ["light torch header, precompiled", "torch-free CUDA unit"]
    light_failed = LIGHT_SYNTAX_ERROR.replace(BUILD, str(tmp_path))
    # Without the light header's scan nothing says `undeclared_thing` is not torch's: retried.
    assert fastbuild._forms_to_retry(light_failed, notes, tmp_path, "") == ["light"]
    monkeypatch.setattr(fastbuild, "_full_header_names", lambda ninja: {"queue", "Tensor"})
    assert fastbuild._forms_to_retry(light_failed, notes, tmp_path, "") == []
    cuda_failed = (f"Error building extension 'ext': [1/3] nvcc\nFAILED: cuda.cuda.o\nnvcc -c x\n"
                   f"{tmp_path}/kcoder_fast.cu(9): error: namespace \"std\" has no member \"vector\"\nninja: stopped")
    assert fastbuild._forms_to_retry(cuda_failed, notes, tmp_path, "") == ["torch_free"]
    link_failed = "Error building extension 'ext': [3/3] c++ main.o -o ext.so\nFAILED: ext.so\nld: error\n"
    assert fastbuild._forms_to_retry(link_failed, notes, tmp_path, "") == ["light", "torch_free"]


def _candidate(cpp: str, name: str) -> str:
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_ext = load_inline(name={name!r}, cpp_sources=[{cpp!r}], functions=["scale_add_relu"])


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return _ext.scale_add_relu(x, y, self.scale)
'''


BROKEN_BODY = """#include <torch/extension.h>

torch::Tensor scale_add_relu(torch::Tensor x, torch::Tensor y, double scale) {{
    auto out = torch::empty_like(x);
    {line}
    return out;
}}
"""


@pytest.mark.slow
@pytest.mark.parametrize("line, expected", [
    ("float s = (scale * );", ["expected primary-expression"]),  # a syntax error
    ("float s = scael * 2;", ["scael", "was not declared"]),  # a name no torch header spells
])
def test_compile_error_reason_points_at_the_line_after_one_compile(tmp_path, line, expected):
    from kcoder.evaluate import evaluate

    candidate = tmp_path / "model_new.py"
    candidate.write_text(_candidate(BROKEN_BODY.format(line=line), "kcoder_compile_error"))
    verdict = evaluate(PROBLEMS / "scale_add.py", candidate, fast_options(stop_after="build"))
    assert verdict.stage == "build" and not verdict.compiled and verdict.reward == -1
    assert re.match(r"cpp_sources:5:\d+: error: ", verdict.reason), verdict.reason
    assert all(part in verdict.reason for part in expected), verdict.reason
    # The build's own account, last line of the log: ninja ran once (no full-header retry).
    assert "kcoder build: 1 compile run," in verdict.log, verdict.log
    assert f"    5 |     {line}" in verdict.log  # the source line, numbered as in cpp_sources


def _compile_cuda_unit_only(build_directory: str, verbose: bool, error_prefix: str) -> None:
    """Stand-in for torch's ninja step: the CUDA unit only (no CUDA libraries to link here)."""
    result = subprocess.run(["ninja", "-v", "cuda.cuda.o"], cwd=build_directory, capture_output=True, text=True)
    raise RuntimeError(f"{error_prefix}: {result.stdout}" if result.returncode else "compiled; not linked")


@pytest.mark.slow
@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_cuda_syntax_error_in_a_torch_free_unit_is_reported_after_one_compile(tmp_path, monkeypatch):
    import torch.utils.cpp_extension as cpp_extension
    from torch.utils._cpp_extension_versioner import ExtensionVersioner

    from kcoder.build import inline as build

    monkeypatch.setenv("KCODER_PCH", "off")
    monkeypatch.setenv("KCODER_LIGHT_HEADER", "off")
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", str(Path(NVCC).resolve().parent.parent))
    monkeypatch.setattr(cpp_extension, "_run_ninja_build", _compile_cuda_unit_only)
    monkeypatch.setattr(cpp_extension, "JIT_EXTENSION_VERSIONER", ExtensionVersioner())
    monkeypatch.setattr(build, "BUILD_RECORDS", [])
    cuda = "#include <cstdint>\n__global__ void k(float* x) {\n    x[0] = (1.0f * );\n}\n"
    load_inline = build.make_load_inline(cpp_extension.load_inline, fast=True)
    with pytest.raises(build.BuildError) as caught:
        load_inline(name="cuda_syntax", cpp_sources="int64_t launch(int64_t n);", cuda_sources=cuda, functions=None)
    record = build.BUILD_RECORDS[-1]
    assert str(caught.value).startswith("cuda_sources:3: error: expected an expression"), str(caught.value)
    assert "torch-free CUDA unit" in record["notes"] and record["compiles"] == 1, record
    assert "kcoder build: 1 compile run" in caught.value.log
