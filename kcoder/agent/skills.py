"""SKILL.md workflows (Agent Skills format): discovery, validation, prompt listing, loading.

A skill is a folder holding SKILL.md: YAML front matter with `name` (= folder name, a-z0-9
and single hyphens, at most 64 characters) and `description` (at most 1024 characters, says
when to use it), then a Markdown body. Only names and descriptions go into the system
prompt; `load_skill` returns the body when the model asks for it.

Folders searched, later ones overriding earlier ones by name: the bundled `skills/`,
`~/.kcoder/skills`, `./.kcoder/skills`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import kcoder

BUNDLED_DIR = kcoder.bundled_path("skills")
NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
MAX_NAME, MAX_DESCRIPTION, MAX_COMPATIBILITY, MAX_BODY_LINES = 64, 1024, 500, 500
KNOWN_FIELDS = {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}


@dataclass
class Skill:
    """One SKILL.md. `problems` make it invalid (not offered to the model); `warnings` don't."""

    name: str
    description: str
    path: Path
    source: str
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.problems

    def body(self) -> str:
        """The Markdown body, read now (so an edited skill is picked up without restarting)."""
        return split_front_matter(self.path.read_text(encoding="utf-8"))[1].strip()


def split_front_matter(text: str) -> tuple[str | None, str]:
    """(front matter text or None, body)."""
    if not text.startswith("---"):
        return None, text
    lines = text.splitlines(keepends=True)
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            return "".join(lines[1:i]), "".join(lines[i + 1:])
    return None, text


def _parse_yaml(text: str) -> dict[str, Any]:
    """The front matter as a mapping; ValueError / TypeError say what is wrong with it."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"front matter is not valid YAML: {str(exc).splitlines()[0]}") from exc
    if not isinstance(data, dict):
        raise TypeError("front matter must be a YAML mapping")
    return data


def validate_skill(folder: Path, source: str = "bundled") -> Skill:
    """Read and check one skill folder against the Agent Skills specification."""
    path = folder / "SKILL.md"
    skill = Skill(name=folder.name, description="", path=path, source=source)
    if not path.is_file():
        skill.problems.append("no SKILL.md in the folder")
        return skill
    front, body = split_front_matter(path.read_text(encoding="utf-8"))
    if front is None:
        skill.problems.append("SKILL.md must start with YAML front matter between '---' lines")
        return skill
    try:
        meta = _parse_yaml(front)
    except (ValueError, TypeError) as exc:
        skill.problems.append(str(exc))
        return skill
    name, description = meta.get("name"), meta.get("description")
    if not isinstance(name, str) or not name:
        skill.problems.append("front matter needs a `name`")
    else:
        skill.name = name
        if len(name) > MAX_NAME:
            skill.problems.append(f"name is {len(name)} characters (at most {MAX_NAME})")
        if not NAME_RE.match(name):
            skill.problems.append("name may use only a-z, 0-9 and single inner hyphens")
        if name != folder.name:
            skill.problems.append(f"name {name!r} must equal the folder name {folder.name!r}")
    if not isinstance(description, str) or not description.strip():
        skill.problems.append("front matter needs a non-empty `description`")
    else:
        skill.description = " ".join(description.split())
        if len(description) > MAX_DESCRIPTION:
            skill.problems.append(f"description is {len(description)} characters "
                                  f"(at most {MAX_DESCRIPTION})")
    compat = meta.get("compatibility")
    if isinstance(compat, str) and len(compat) > MAX_COMPATIBILITY:
        skill.problems.append(f"compatibility is longer than {MAX_COMPATIBILITY} characters")
    if "metadata" in meta and not isinstance(meta["metadata"], dict):
        skill.problems.append("metadata must be a mapping")
    unknown = sorted(set(meta) - KNOWN_FIELDS)
    if unknown:
        skill.warnings.append("fields outside the specification: " + ", ".join(unknown))
    n_lines = len(body.strip().splitlines())
    if n_lines >= MAX_BODY_LINES:
        skill.warnings.append(f"body is {n_lines} lines (keep it under {MAX_BODY_LINES})")
    return skill


def default_skill_dirs(cwd: Path | None = None) -> list[tuple[str, Path]]:
    """(source label, folder) pairs in override order: bundled, user, project."""
    cwd = cwd or Path.cwd()
    return [("bundled", BUNDLED_DIR), ("user", Path.home() / ".kcoder" / "skills"),
            ("project", cwd / ".kcoder" / "skills")]


def list_skills(dirs: list[tuple[str, Path]] | None = None) -> list[Skill]:
    """Every skill found, valid or not (for `kcoder skills`), sorted by name. A later folder's
    skill replaces an earlier one of the same folder name; the replacement is noted."""
    found: dict[str, Skill] = {}
    for source, folder in dirs if dirs is not None else default_skill_dirs():
        if not folder.is_dir():
            continue
        for sub in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
            skill = validate_skill(sub, source)
            if sub.name in found:
                skill.warnings.append(f"overrides the {found[sub.name].source} skill")
            found[sub.name] = skill
    return sorted(found.values(), key=lambda s: s.name)


class SkillCatalog:
    """The valid skills of a run."""

    def __init__(self, skills: list[Skill]) -> None:
        self.all = skills
        self._valid = {s.name: s for s in skills if s.valid}

    @classmethod
    def discover(cls, dirs: list[tuple[str, Path]] | None = None) -> SkillCatalog:
        return cls(list_skills(dirs))

    def names(self) -> list[str]:
        return list(self._valid)

    def get(self, name: str) -> Skill | None:
        return self._valid.get(name.strip())

    def prompt_listing(self) -> str:
        """Names and descriptions only: what goes into the system prompt."""
        return "\n".join(f"- {s.name}: {s.description}" for s in self._valid.values())
