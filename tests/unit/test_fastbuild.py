"""The faster build path (harness/fastbuild.py): same code, built faster, never a false verdict.

CPU tests build real extensions through the evaluator; the CUDA-unit tests run real nvcc on
load_inline's own build.ninja (compile steps only: the CPU torch here has no CUDA libraries
to link against, so the full CUDA build is covered by the gpu tests)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest
from helpers import PROBLEMS, fast_options
from sources import candidate_source

from kcoder.build import fastbuild, lightheader
from kcoder.build.inline import cache_root
from kcoder.evaluate import evaluate

NVCC = "/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else shutil.which("nvcc")


def test_leading_torch_includes_stop_at_the_first_other_line():
    source = ("#include <torch/extension.h>\n\n// the stream\n#include <c10/cuda/CUDAStream.h>\n"
              "#include <vector>\n#include <ATen/ATen.h>\nint x;\n")
    assert fastbuild.leading_torch_includes(source) == [
        "#include <torch/extension.h>", "#include <c10/cuda/CUDAStream.h>"]
    assert fastbuild.leading_torch_includes("#define X 1\n#include <torch/extension.h>\n") == []


@pytest.mark.parametrize("code, free", [
    ("__global__ void k(float* x) { x[0] = 1.0f; }", True),
    ("#include <torch/extension.h>\n__global__ void k() {}", False),
    ("void f(at::Tensor t);", False),
    ("#define CHECK(x) TORCH_CHECK(x)", False),
    ("c10::cuda::getCurrentCUDAStream();", False),
    ("int attribute; // 'at' inside words is fine", True),
])
def test_torch_free_cuda_detection(code, free):
    implicit = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
    assert fastbuild.torch_free_cuda(implicit + code) is free
    assert fastbuild.torch_free_cuda(code) is False  # no_implicit_headers: nothing to leave out


def test_accelerate_rewrites_only_the_cuda_unit_and_keeps_line_numbers(tmp_path, monkeypatch):
    monkeypatch.setenv("KCODER_PCH", "off")
    cu = tmp_path / "cuda.cu"
    cu.write_text("#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n__global__ void k() {}\n")
    (tmp_path / "main.cpp").write_text("#include <torch/extension.h>\nint f();\n")
    ninja = (f"cxx = c++\ncflags = -O2\nrule compile\n  command = $cxx $cflags -c $in -o $out\n"
             f"build main.o: compile {tmp_path / 'main.cpp'}\nbuild cuda.cuda.o: cuda_compile {cu}\n")
    notes: list[str] = []
    fast = fastbuild.accelerate(ninja, tmp_path, notes)
    assert f"cuda_compile {tmp_path / fastbuild.FAST_CUDA_SOURCE}\n" in fast and "cflags = -O2\n" in fast
    assert notes == ["torch-free CUDA unit"]
    fast_cu = (tmp_path / fastbuild.FAST_CUDA_SOURCE).read_text().split("\n")
    assert len(fast_cu) == len(cu.read_text().split("\n")) and "torch/types.h" not in fast_cu[0]
    assert fast_cu[3] == "__global__ void k() {}"


def test_light_header_is_extensions_own_list_without_the_cpp_frontend():
    from torch.utils.cpp_extension import include_paths

    light = lightheader.light_includes(include_paths())
    assert light, "this torch's extension.h is expected to be all.h + python.h"
    assert "#include <torch/types.h>" in light and "#include <torch/csrc/utils/pybind.h>" in light
    for frontend in ("torch/nn.h", "torch/optim.h", "torch/data.h", "torch/serialize.h", "torch/nn/module.h"):
        assert f"#include <{frontend}>" not in light
    assert len(light) == len(set(light))
    assert lightheader.light_includes(["/nonexistent"]) is None


def test_rewrite_main_blanks_only_the_leading_extension_includes():
    main = "#include <torch/extension.h>\n\n#include <torch/extension.h>\nint f();\n#include <torch/extension.h>\n"
    block = fastbuild.leading_torch_includes(main)
    out = lightheader.rewrite_main(main, block).split("\n")
    assert len(out) == len(main.split("\n"))
    assert [line for line in out if "torch/extension.h>" in line and line.startswith("#")] == [
        "#include <torch/extension.h>"]  # the one after code stays: it is not force-included
    assert out[3] == "int f();"


@pytest.mark.parametrize("code, blocked", [
    ("torch::Tensor f(torch::Tensor x) { return x.relu(); }", None),
    ("auto y = torch::nn::functional::relu(x);", "nn::"),
    ("using namespace torch; auto o = optim :: SGD(p, 0.1);", "optim::"),
    ("TORCH_MODULE(Net);", "TORCH_MODULE"),
    ("#ifdef TORCH_ARG\nint frontend = 1;\n#endif", "TORCH_ARG"),
    ("int data = x.data_ptr<float>() != nullptr; int64_t rows = x.size(0);", None),  # words, not the namespace
    ("float v = torch::load<float>(ptr);", "load"),  # c10::load with the light header, torch::load without
])
def test_blocking_name_finds_what_only_the_full_header_declares(code, blocked):
    full_only = {"TORCH_MODULE", "TORCH_ARG"}
    assert lightheader.blocking_name(code, full_only) == blocked


def test_full_only_macros_come_from_the_real_headers(tmp_path):
    from torch.utils.cpp_extension import include_paths

    dirs = [*include_paths(), sysconfig.get_paths()["include"]]
    flags = [f for d in dirs for f in ("-isystem", d)] + ["-std=c++17", "-DTORCH_API_INCLUDE_EXTENSION_H"]
    light = lightheader.light_includes(dirs)
    macros = lightheader.full_only_macros(tmp_path, "c++", flags, light)
    assert macros, (tmp_path / "log").read_text() if (tmp_path / "log").exists() else "no macros"
    # The frontend's own macros; none the light header also defines, and no plain names.
    assert {"TORCH_MODULE", "TORCH_ARG"} <= macros
    assert not {"TORCH_CHECK", "PYBIND11_MODULE", "AT_DISPATCH_FLOATING_TYPES", "Sequential", "rows"} & macros
    # Beside them, every identifier the full header spells: a failed light build whose
    # undeclared name is not among them is not built again (it cannot be torch's).
    names = lightheader.full_names(tmp_path)
    assert names and {"Sequential", "queue", "nn", "rows", "TORCH_MODULE"} <= names
    assert "undeclared_thing" not in names and "scael" not in names


def _testlib_variant(tag: str) -> str:
    """A candidate with its own build (a distinct comment) and the test library's flags."""
    return candidate_source("return _ext.scale_add_relu(x, y, self.scale)").replace(
        "cpp_sources=[", f"cpp_sources=['// {tag}\\n' + ", 1)


@pytest.mark.slow
def test_precompiled_header_build_is_correct_and_plain_build_still_passes(tmp_path, monkeypatch):
    candidate = tmp_path / "model_new.py"
    candidate.write_text(_testlib_variant("fastbuild-pch"))
    monkeypatch.setenv("KCODER_PCH", "wait")  # build the header now if no earlier test started it
    fast = evaluate(PROBLEMS / "scale_add.py", candidate, fast_options(stop_after="verify"))
    assert fast.correct, fast.reason
    note = next(n for n in fast.notes if n.startswith("extension "))
    # The test library names nothing of torch's C++ frontend: the light header applies.
    assert "fast build" in note and "light torch header, precompiled" in note, note
    # The compiler really reads the .gch (an unusable one would be skipped silently).
    build_dir = next(d for d in (cache_root() / "build").glob("kcoder_testlib-*")
                     if "// fastbuild-pch" in (d / "main.cpp").read_text())
    ninja = (build_dir / "build.ninja").read_text()
    variables = fastbuild.parse_ninja_variables(ninja)
    # (an earlier run with the same KCODER_TEST_CACHE may have left main.o in the object cache)
    source = re.search(r"^(?:# kcoder reused: )?build main\.o: compile (\S+)$", ninja, re.M).group(1)
    assert source.endswith(lightheader.LIGHT_MAIN_SOURCE), source
    shown = subprocess.run([variables["cxx"], *variables["cflags"].split(), "-H", "-fsyntax-only",
                            source], capture_output=True, text=True)
    assert any(line.startswith("! ") and line.endswith(".gch") for line in shown.stderr.splitlines()), \
        shown.stderr[:2000]

    plain = evaluate(PROBLEMS / "scale_add.py", candidate, fast_options(stop_after="verify", fast_build=False))
    assert plain.correct, plain.reason
    plain_note = next(n for n in plain.notes if n.startswith("extension "))
    assert "built" in plain_note and "plain build" in plain_note and "precompiled" not in plain_note, plain_note


@pytest.mark.slow
def test_unchanged_unit_is_linked_from_the_object_cache_in_a_new_build(tmp_path, monkeypatch):
    candidate = tmp_path / "model_new.py"
    candidate.write_text(_testlib_variant("fastbuild-pch"))  # the build the test above made, if it ran
    monkeypatch.setenv("KCODER_PCH", "wait")
    first = evaluate(PROBLEMS / "scale_add.py", candidate, fast_options(stop_after="build"))
    assert first.compiled, first.reason
    for build_dir in (cache_root() / "build").glob("kcoder_testlib-*"):
        if "// fastbuild-pch" in (build_dir / "main.cpp").read_text():
            shutil.rmtree(build_dir)  # as if the next candidate had its own build directory

    again = evaluate(PROBLEMS / "scale_add.py", candidate, fast_options(stop_after="verify"))
    assert again.correct, again.reason
    note = next(n for n in again.notes if n.startswith("extension "))
    assert "built" in note and "reused main.o" in note, note
    build_dir = next(d for d in (cache_root() / "build").glob("kcoder_testlib-*")
                     if "// fastbuild-pch" in (d / "main.cpp").read_text())
    assert "\n# kcoder reused: build main.o:" in (build_dir / "build.ninja").read_text()


@pytest.mark.slow
def test_binding_that_needs_the_cpp_frontend_unseen_is_built_with_the_full_header(tmp_path, monkeypatch):
    # The frontend type is spelled through token pasting, so the name check cannot see it:
    # the light build fails, and kcoder must build it as plain load_inline does, not fail it.
    cpp = ("#define JOIN(a, b) a##b\n"
           "int64_t frontend_size() { torch::JOIN(n, n)::JOIN(Seq, uential) s; return (int64_t)s->size() + 7; }\n")
    import torch.utils.cpp_extension as cpp_extension
    from torch.utils._cpp_extension_versioner import ExtensionVersioner

    from kcoder.build import inline as build

    monkeypatch.setattr(cpp_extension, "JIT_EXTENSION_VERSIONER", ExtensionVersioner())
    for earlier in (cache_root() / "build").glob("lightfallback-*"):  # a kept KCODER_TEST_CACHE
        shutil.rmtree(earlier)
    load_inline = build.make_load_inline(cpp_extension.load_inline, fast=True)
    module = load_inline(name="lightfallback", cpp_sources=cpp, functions=["frontend_size"])
    assert module.frontend_size() == 7
    record = build.BUILD_RECORDS[-1]
    assert "light torch header failed; built with the full torch header" in record["notes"], record
    assert "uential" in record.get("fast_error", "") or "Sequential" in record.get("fast_error", ""), record
    assert record["compiles"] == 2, record  # the retry a missing declaration earns
    ninja = (Path(record["dir"]) / "build.ninja").read_text()
    assert f"compile {Path(record['dir']) / 'main.cpp'}\n" in ninja


def test_binding_naming_the_frontend_is_not_given_the_light_header(tmp_path, monkeypatch):
    from torch.utils.cpp_extension import include_paths

    monkeypatch.setenv("KCODER_PCH", "off")
    dirs = [*include_paths(), sysconfig.get_paths()["include"]]
    cflags = " ".join(f"-isystem {d}" for d in dirs) + " -std=c++17"
    ninja = f"cxx = c++\ncflags = {cflags}\nrule compile\n  command = $cxx $cflags -c $in -o $out\n" \
            f"build main.o: compile {tmp_path / 'main.cpp'}\n"
    for code, light in (("auto y = torch::nn::functional::relu(x);", False), ("auto y = x.relu();", True)):
        (tmp_path / "main.cpp").write_text(f"#include <torch/extension.h>\nvoid f(torch::Tensor x) {{ {code} }}\n")
        notes: list[str] = []
        text = fastbuild.accelerate(ninja, tmp_path, notes)
        assert (lightheader.LIGHT_MAIN_SOURCE in text) is light, (code, notes)
        assert ("full torch header (nn::)" in notes) is (not light), notes


def test_object_key_follows_flags_source_and_include_paths(tmp_path):
    source = tmp_path / "main.cpp"
    source.write_text("int f() { return 1; }\n")
    ninja = "cxx = c++\ncflags = -O2 -isystem /usr/include\npost_cflags = -fPIC\n"
    key = fastbuild.object_key(ninja, "compile", source)
    assert key and key == fastbuild.object_key(ninja, "compile", source)
    assert fastbuild.object_key(ninja.replace("-O2", "-O3"), "compile", source) != key
    assert fastbuild.object_key(ninja.replace("-fPIC", "-fPIC -DX"), "compile", source) != key
    source.write_text("int f() { return 2; }\n")
    assert fastbuild.object_key(ninja, "compile", source) != key
    # A user include folder may hold headers the key cannot see: such units are never reused.
    assert fastbuild.object_key(ninja.replace("-O2", "-O2 -I/home/me/inc"), "compile", source) is None


def _compile_objects_only(build_directory: str, verbose: bool, error_prefix: str) -> None:
    """Stand-in for torch's ninja step: compile both units, skip the link (no CUDA libs here);
    torch's import of the missing module then fails, which kcoder reports as a build error."""
    result = subprocess.run(["ninja", "-v", "main.o", "cuda.cuda.o"], cwd=build_directory,
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{error_prefix}: {result.stdout}")


def _cuda_build(tmp_path: Path, monkeypatch, cuda_source: str,
                cpp_source: str = "int64_t launch(int64_t n);") -> tuple[dict, Path]:
    """Run kcoder's load_inline wrapper on a CUDA extension up to its object files."""
    import torch.utils.cpp_extension as cpp_extension

    from kcoder.build import inline as build

    monkeypatch.setenv("KCODER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("KCODER_PCH", "off")
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", str(Path(NVCC).resolve().parent.parent))
    monkeypatch.setattr(cpp_extension, "_run_ninja_build", _compile_objects_only)
    monkeypatch.setattr(build, "BUILD_RECORDS", [])
    # Each build as in its own worker process: torch renames a second build of one name in a
    # process (name_v1), which a fresh worker never does.
    from torch.utils._cpp_extension_versioner import ExtensionVersioner
    monkeypatch.setattr(cpp_extension, "JIT_EXTENSION_VERSIONER", ExtensionVersioner())
    load_inline = build.make_load_inline(cpp_extension.load_inline, fast=True)
    with pytest.raises(build.BuildError, match="compile"):
        load_inline(name="fastcu", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=None)
    record = build.BUILD_RECORDS[-1]
    return record, Path(record["dir"])


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_torch_free_cuda_unit_compiles_without_the_torch_header(tmp_path, monkeypatch):
    code = ("#include <cuda_runtime.h>\n#include <cstdint>\n__global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n"
            "int64_t launch(int64_t n) { k<<<1, 32>>>(nullptr); return n; }\n")
    record, build_dir = _cuda_build(tmp_path, monkeypatch, code)
    assert record["mode"] == "fast" and "torch-free CUDA unit" in record["notes"], record
    assert (build_dir / "cuda.cuda.o").exists()
    assert fastbuild.FAST_CUDA_SOURCE in (build_dir / "build.ninja").read_text()


@pytest.mark.slow
@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_next_turn_with_a_new_kernel_reuses_the_binding_object(tmp_path, monkeypatch):
    cpp = "#include <torch/extension.h>\nint64_t launch(int64_t n);\nint64_t call(int64_t n) { return launch(n); }\n"

    def kernel(value: str) -> str:
        return ("#include <cstdint>\n__global__ void k(float* x) { x[0] = " + value + "; }\n"
                "int64_t launch(int64_t n) { return n; }\n")

    first, _ = _cuda_build(tmp_path, monkeypatch, kernel("1.0f"), cpp)
    assert not any(n.startswith("reused") for n in first["notes"]), first
    second, build_dir = _cuda_build(tmp_path, monkeypatch, kernel("2.0f"), cpp)
    assert "reused main.o" in second["notes"], second
    assert second["dir"] != first["dir"]
    assert (build_dir / "main.o").read_bytes() == (Path(first["dir"]) / "main.o").read_bytes()
    assert (build_dir / "cuda.cuda.o").exists()


@pytest.mark.slow
@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_cuda_unit_that_needed_the_torch_header_is_built_with_it(tmp_path, monkeypatch):
    # std::vector comes in through torch/types.h: without it nvcc fails, and kcoder must not
    # turn that into a compile error the plain build would not give.
    code = "int64_t launch(int64_t n) { std::vector<int64_t> v(3, n); return v[1]; }\n"
    record, build_dir = _cuda_build(tmp_path, monkeypatch, code)
    assert "vector" in record.get("fast_error", ""), record
    assert "torch-free CUDA unit failed; built with the torch header" in record["notes"]
    assert record["compiles"] == 2, record
    assert (build_dir / "cuda.cuda.o").exists()
    assert fastbuild.FAST_CUDA_SOURCE not in (build_dir / "build.ninja").read_text()

