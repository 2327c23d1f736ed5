"""Model profiles: per-model settings (tool-call mode, context window, temperature, tool set).

The data lives in profiles.json beside this module so that adding a model is a data change.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcoder.choices import TOOL_CALL_MODES, check_choice

PROFILES_FILE = Path(__file__).with_name("profiles.json")


@dataclass(frozen=True)
class ToolAlias:
    """A kcoder tool offered to the model under another name and argument names."""

    exposed: str
    tool: str
    args: dict[str, str] = field(default_factory=dict)  # exposed argument -> kcoder argument


@dataclass
class Profile:
    """Settings for one family of models."""

    name: str
    match: list[str]
    tool_call: str = "auto"
    context_window: int = 32768
    max_output_tokens: int = 8192
    temperature: float | None = 0.2
    tools: list[ToolAlias] = field(default_factory=list)


def _alias(entry: str | dict[str, Any]) -> ToolAlias:
    if isinstance(entry, str):
        return ToolAlias(entry, entry)
    return ToolAlias(entry["as"], entry["tool"], dict(entry.get("args", {})))


def load_profiles(path: Path = PROFILES_FILE) -> list[Profile]:
    """Read every profile, in matching order."""
    data = json.loads(path.read_text(encoding="utf-8"))
    default_tools = data.get("default_tools", [])
    profiles = []
    for raw in data["profiles"]:
        tools = [_alias(t) for t in raw.get("tools", default_tools)]
        profiles.append(Profile(
            name=raw["name"], match=list(raw["match"]), tool_call=raw.get("tool_call", "auto"),
            context_window=int(raw.get("context_window", 32768)),
            max_output_tokens=int(raw.get("max_output_tokens", 8192)),
            temperature=raw.get("temperature"), tools=tools,
        ))
    return profiles


def resolve_profile(model: str, name: str | None = None, tool_call: str | None = None) -> Profile:
    """The profile for `model` (or the one called `name`), with `tool_call` overriding its mode.

    Raises ValueError naming the choices when `name` or `tool_call` is unknown.
    """
    profiles = load_profiles()
    if name:
        chosen = next((p for p in profiles if p.name == name), None)
        if chosen is None:
            raise ValueError(f"unknown profile {name!r}; choose from "
                             + ", ".join(p.name for p in profiles))
    else:
        lowered = model.lower()
        chosen = next(p for p in profiles
                      if any(fnmatch.fnmatchcase(lowered, m.lower()) for m in p.match))
    if tool_call:
        check_choice("tool-call mode", tool_call, TOOL_CALL_MODES)
        chosen.tool_call = tool_call
    return chosen


def concrete_tool_call_mode(profile: Profile, model: str) -> str:
    """Turn "auto" into native/text by asking litellm whether the model has tool calling."""
    if profile.tool_call != "auto":
        return profile.tool_call
    import litellm  # lazy: slow import, only needed once a run starts

    try:
        return "native" if litellm.supports_function_calling(model=model) else "text"
    except Exception:  # noqa: BLE001 - unknown model names raise various errors; text always works
        return "text"
