"""ptxas's resource cache lives in $KCODER_CACHE/profile, a folder that other processes (a
candidate's, under `--sandbox none`) can write: a link planted there never redirects kcoder's
write or read (issue 37). A fake nvcc prints one ptxas report, so no compiler is needed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FAKE_NVCC = """#!/bin/sh
echo "ptxas info    : Compiling entry function '_Z6kernelPf' for 'sm_90'"
echo "ptxas info    : Used 12 registers, 360 bytes cmem[0]"
"""


@pytest.fixture
def build(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("KCODER_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "build"
    folder.mkdir()
    nvcc = folder / "nvcc.sh"
    nvcc.write_text(FAKE_NVCC)
    nvcc.chmod(0o755)
    (folder / "cuda.cu").write_text("__global__ void kernel(float* x) {}\n")
    (folder / "build.ninja").write_text(f"nvcc = {nvcc}\ncuda_cflags = -O2\n"
                                        f"build cuda.cuda.o: cuda_compile {folder / 'cuda.cu'}\n")
    return folder


def test_a_link_planted_at_the_cache_entry_is_replaced_not_followed(build, tmp_path):
    from kcoder.profile.ptxas import compile_report

    first = compile_report(build, 60.0, sandbox="none")
    assert first.error is None and [k.registers for k in first.kernels] == [12] and not first.cached
    [entry] = (tmp_path / "cache" / "profile").glob("ptxas-*.json")
    users = tmp_path / "users-file.txt"
    users.write_text("the user's own words\n")
    entry.unlink()
    entry.symlink_to(users)  # planted: kcoder would write its JSON into the user's file
    second = compile_report(build, 60.0, sandbox="none")
    assert not second.cached and [k.registers for k in second.kernels] == [12]
    assert users.read_text() == "the user's own words\n"
    assert entry.is_file() and not entry.is_symlink()
    assert compile_report(build, 60.0, sandbox="none").cached  # the entry kcoder wrote is used again
    assert sorted(p.name for p in entry.parent.iterdir()) == [entry.name]  # no temporary left


def test_a_link_planted_for_the_cache_folder_is_not_followed(build, tmp_path):
    from kcoder.profile.ptxas import compile_report

    elsewhere = tmp_path / "users-folder"
    elsewhere.mkdir()
    (tmp_path / "cache").mkdir()
    os.symlink(elsewhere, tmp_path / "cache" / "profile")
    report = compile_report(build, 60.0, sandbox="none")
    assert [k.registers for k in report.kernels] == [12]
    assert list(elsewhere.iterdir()) == []
    assert any("ptxas report not cached" in n for n in report.notes), report.notes
