"""Skills: bundled ones valid, invalid ones flagged, only name+description in the prompt."""

from __future__ import annotations

import json
from pathlib import Path

from kcoder.agent.profiles import resolve_profile
from kcoder.agent.skills import BUNDLED_DIR, SkillCatalog, list_skills
from kcoder.agent.toolbox import Toolbox, ToolContext
from kcoder.evaluate.options import EvalOptions
from kcoder.replies import ToolCall
from kcoder.workspace import Workspace

REQUIRED = {"optimize-workflow", "kernel-fusion", "reductions-softmax-layernorm",
            "gemm-epilogue", "profiler-output"}


def _skill(root: Path, folder: str, text: str) -> None:
    (root / folder).mkdir(parents=True)
    (root / folder / "SKILL.md").write_text(text)


def test_bundled_skills_are_valid():
    skills = list_skills([("bundled", BUNDLED_DIR)])
    assert REQUIRED <= {s.name for s in skills}
    for s in skills:
        assert s.valid, (s.name, s.problems)
        assert not s.warnings, (s.name, s.warnings)
        assert len(s.body().splitlines()) < 500


def test_invalid_skills_are_flagged(tmp_path):
    _skill(tmp_path, "good-one", "---\nname: good-one\ndescription: Use when testing.\n---\nBody\n")
    _skill(tmp_path, "Bad_Name", "---\nname: Bad_Name\ndescription: x\n---\n")
    _skill(tmp_path, "mismatch", "---\nname: other-name\ndescription: x\n---\n")
    _skill(tmp_path, "no-desc", "---\nname: no-desc\n---\nbody\n")
    _skill(tmp_path, "long-desc", f"---\nname: long-desc\ndescription: {'x' * 1100}\n---\n")
    _skill(tmp_path, "no-front", "# just markdown\n")
    _skill(tmp_path, "bad-yaml", "---\nname: [unclosed\n---\n")
    _skill(tmp_path, "double--hyphen", "---\nname: double--hyphen\ndescription: x\n---\n")
    by_folder = {s.path.parent.name: s for s in list_skills([("project", tmp_path)])}
    assert by_folder["good-one"].valid
    expectations = {
        "Bad_Name": "only a-z", "mismatch": "must equal the folder name",
        "no-desc": "description", "long-desc": "at most 1024", "no-front": "front matter",
        "bad-yaml": "not valid YAML", "double--hyphen": "single inner hyphens",
    }
    for folder, words in expectations.items():
        skill = by_folder[folder]
        assert not skill.valid and any(words in p for p in skill.problems), (folder, skill.problems)
    catalog = SkillCatalog(list(by_folder.values()))
    assert catalog.names() == ["good-one"]  # invalid skills are never offered


def test_prompt_listing_has_no_bodies_and_load_skill_returns_body(tmp_path, problem):
    _skill(tmp_path, "my-skill", "---\nname: my-skill\ndescription: Use for X.\n---\n"
           "SECRET-BODY-MARKER\n")
    catalog = SkillCatalog.discover([("bundled", BUNDLED_DIR), ("project", tmp_path)])
    listing = catalog.prompt_listing()
    assert "- my-skill: Use for X." in listing and "SECRET-BODY-MARKER" not in listing
    assert "optimize-workflow" in listing
    ws = Workspace.create(problem, runs_dir=tmp_path / "runs")
    ctx = ToolContext(workspace=ws, options=EvalOptions(), skills=catalog)
    box = Toolbox(resolve_profile("anthropic/x").tools)
    obs = box.call(ToolCall("1", "load_skill", json.dumps({"name": "my-skill"})), ctx)
    assert obs.ok and "SECRET-BODY-MARKER" in obs.text
    obs = box.call(ToolCall("2", "load_skill", json.dumps({"name": "nope"})), ctx)
    assert not obs.ok and "available" in obs.text


def test_later_folders_override(tmp_path):
    user, project = tmp_path / "user", tmp_path / "project"
    _skill(user, "kernel-fusion", "---\nname: kernel-fusion\ndescription: user version\n---\n")
    _skill(project, "kernel-fusion", "---\nname: kernel-fusion\ndescription: project one\n---\n")
    skills = list_skills([("bundled", BUNDLED_DIR), ("user", user), ("project", project)])
    fusion = next(s for s in skills if s.name == "kernel-fusion")
    assert fusion.source == "project" and fusion.description == "project one"
    assert any("overrides" in w for w in fusion.warnings)
