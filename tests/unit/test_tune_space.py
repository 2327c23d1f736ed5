"""Tuning declarations: reading TUNE/CONFIG/TUNE_CONSTRAINTS, safe constraints, CONFIG rewrite.
No builds: all static."""

from __future__ import annotations

import ast

import pytest

from kcoder.tune.space import SpaceError, evaluate_constraint, format_config, load_space, parse_space

SOURCE = '''"""A candidate (é: non-ASCII before the literal, so columns are bytes, not characters)."""
import torch

TUNE = {"BLOCK": [128, 256, 512], "VEC": [1, 2, 4], "FAST": [True, False]}
CONFIG = {
    "BLOCK": 256,  # the hand-picked one
    "VEC": 4,
    "FAST": True,
}
TUNE_CONSTRAINTS = ["BLOCK * VEC <= 1024", "FAST or VEC == 1"]
FLAGS = [f"-D{k}={int(v)}" for k, v in CONFIG.items()]
'''


def space(source: str = SOURCE):
    return parse_space(source, "cand.py")


def test_space_points_and_current_first():
    s = space()
    assert s.size == 18 and s.params["BLOCK"] == [128, 256, 512]
    points = list(s.points())
    assert points[0] == {"BLOCK": 256, "VEC": 4, "FAST": True} and len(points) == 18
    assert len({format_config(p) for p in points}) == 18


def test_rewrite_changes_only_the_config_literal():
    s = space()
    new = s.rewrite({"BLOCK": 128, "VEC": 2, "FAST": False})
    start, end = s.spans["CONFIG"].start, s.spans["CONFIG"].end
    data, out = SOURCE.encode(), new.encode()
    literal = b'{"BLOCK": 128, "VEC": 2, "FAST": False}'
    assert out == data[:start] + literal + data[end:]
    again = parse_space(new, "cand.py")
    assert again.current == {"BLOCK": 128, "VEC": 2, "FAST": False}
    assert again.params == s.params and again.kernel_key() == s.kernel_key()
    ast.parse(new)


def test_kernel_key_ignores_space_and_choice_not_code():
    s = space()
    narrowed = SOURCE.replace('"BLOCK": [128, 256, 512]', '"BLOCK": [256, 512]')
    assert space(narrowed).kernel_key() == s.kernel_key()
    assert space(SOURCE.replace("import torch", "import torch  # v2")).kernel_key() != s.kernel_key()


def test_constraints_are_evaluated_safely():
    s = space()
    assert s.violated({"BLOCK": 512, "VEC": 4, "FAST": True}) == "BLOCK * VEC <= 1024"
    assert s.violated({"BLOCK": 128, "VEC": 2, "FAST": False}) == "FAST or VEC == 1"
    assert s.violated({"BLOCK": 128, "VEC": 1, "FAST": False}) is None
    assert evaluate_constraint("max(A, 2) % A == 0 if A else False", {"A": 0}) is False
    assert evaluate_constraint("4096 // A > 2", {"A": 0}) is False  # a failing expression: violated
    assert evaluate_constraint("2 ** A < 10", {"A": 10**6}) is False  # no unbounded powers


@pytest.mark.parametrize("constraint, message", [
    ("__import__('os').system('true')", "only min(), max() and abs()"),
    ("BLOCK.real > 2", "Attribute is not allowed"),
    ("BLOK > 2", "unknown name 'BLOK'"),
    ("[x for x in BLOCK]", "is not allowed"),
    ("BLOCK >", "not a valid expression"),
])
def test_bad_constraints_are_refused_by_name(constraint, message):
    source = SOURCE.replace('"FAST or VEC == 1"', repr(constraint))
    with pytest.raises(SpaceError, match="cand.py") as info:
        space(source)
    assert message in str(info.value)


@pytest.mark.parametrize("edit, message", [
    (("TUNE = ", "TUNED = "), "declares no TUNE space"),
    (("CONFIG = {", "CFG = {"), "declares TUNE but no CONFIG"),
    (('"BLOCK": 256,', '"BLOCK": 333,'), "BLOCK=333, which is not in TUNE['BLOCK']"),
    (('"FAST": True,\n', ""), "missing FAST"),
    (("[128, 256, 512]", "list(range(3))"), "TUNE must be a plain literal"),
    (("[128, 256, 512]", "[128, 128]"), "lists a value twice"),
    (("[128, 256, 512]", "[]"), "non-empty list"),
    (('"VEC": 4,', '"VEC": 4, "EXTRA": 1,'), "unknown EXTRA"),
    (("import torch", "import torch\nCONFIG = {}"), "assigned more than once"),
    (('"FAST": True,', '"FAST": 1,'), "FAST=1, which is not in"),  # 1 is not True: types matter
    (("import torch", "import torch(\n"), "not valid Python"),
])
def test_bad_declarations_name_file_and_problem(edit, message):
    with pytest.raises(SpaceError) as info:
        space(SOURCE.replace(*edit))
    assert str(info.value).startswith("cand.py") and message in str(info.value)


def test_load_space_reads_only(tmp_path):
    path = tmp_path / "cand.py"
    path.write_text(SOURCE)
    before = path.stat().st_mtime_ns
    s = load_space(path)
    s.rewrite({"BLOCK": 128, "VEC": 1, "FAST": False})
    assert path.read_text() == SOURCE and path.stat().st_mtime_ns == before
    with pytest.raises(SpaceError, match="missing.py: cannot be read"):
        load_space(tmp_path / "missing.py")


def test_rewrite_refuses_points_outside_the_space():
    with pytest.raises(SpaceError, match="not in TUNE"):
        space().rewrite({"BLOCK": 64, "VEC": 1, "FAST": True})
