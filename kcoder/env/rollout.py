"""`kcoder rollout`: episodes of a policy over problems, one chat-format JSONL file each.

Each episode runs in a process of its own through the suite's backends (the local pool, or
Ray: one device per episode), and its record comes back here. The output folder holds

    episodes/<problem>-<k>.jsonl   one line: {"messages": [...], "tools": [...], "rewards": [...],
                                   "reward", "verdict", "status", "steps", ...} (SFT/RL ready:
                                   `cat episodes/*.jsonl` is a dataset of conversations)
    rollouts.jsonl                 a line per finished episode: reward, status, turns, seconds
    rollout.json                   what was asked (problems, policy, episodes, settings)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from kcoder.settings import Settings
from kcoder.suite.problems import SuiteInputError, collect_problems

EPISODES_DIR = "episodes"
INDEX = "rollouts.jsonl"
Execute = Callable[[dict[str, Any], Any], dict[str, Any]]


def episode_specs(sources: list[str], settings: Settings, policy: str, episodes: int,
                  seed: int) -> list[dict[str, Any]]:
    """One spec per problem and episode (the problem's source travels in it)."""
    from kcoder.suite.command import settings_fields

    if episodes < 1:
        raise SuiteInputError("--episodes must be at least 1")
    problems = collect_problems(sources)
    fields = settings_fields(settings)
    return [{"name": f"{p.name}-{k:03d}", "mode": "rollout", "problem": str(p.path),
             "problem_source": p.path.read_text(), "episode": k, "seed": seed + k, "policy": policy,
             "settings": fields} for p in problems for k in range(episodes)]


def write_episode(out_dir: Path, record: dict[str, Any]) -> dict[str, Any]:
    """Write the episode's JSONL file; the index line (the record without the conversation)."""
    folder = out_dir / EPISODES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    if "messages" in record:
        (folder / f"{record['name']}.jsonl").write_text(json.dumps(record, default=str) + "\n")
    line = {k: v for k, v in record.items() if k not in ("messages", "tools", "steps")}
    line["verdict"] = (record.get("verdict") or {}).get("reason")
    with open(out_dir / INDEX, "a") as fh:
        fh.write(json.dumps(line, default=str) + "\n")
    return line


def run_rollout(sources: list[str], settings: Settings, *, policy: str, episodes: int, out_dir: Path,
                seed: int = 0, backend: str = "pool", ray_address: str | None = None,
                workers: int | None = None, on_line: Callable[[dict[str, Any]], None] | None = None,
                execute: Execute | None = None) -> list[dict[str, Any]]:
    """Run every episode; returns the index lines in completion order. `execute` replaces
    the process runner (tests)."""
    from kcoder.suite import ray_backend, schedule

    specs = episode_specs(sources, settings, policy, episodes, seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / INDEX).unlink(missing_ok=True)
    (out_dir / "rollout.json").write_text(json.dumps(
        {"problems": sources, "policy": policy, "episodes": episodes, "seed": seed, "backend": backend,
         "date": time.strftime("%Y-%m-%d %H:%M"), "settings": specs[0]["settings"] if specs else None},
        indent=2, default=str) + "\n")
    lines: list[dict[str, Any]] = []

    def on_result(record: dict[str, Any]) -> None:
        lines.append(write_episode(out_dir, record))
        if on_line:
            on_line(lines[-1])

    run = execute or partial(schedule.execute_task, module="kcoder.env.episode")
    if backend == "ray":
        if not ray_backend.ray_installed():
            raise SuiteInputError("--backend ray needs Ray: pip install 'kcoder[ray]'")
        ray_backend.connect(ray_address)
        ray_backend.run_ray(specs, ray_backend.cluster_slots(settings.device, workers), on_result, run)
    else:
        schedule.run_pool(specs, schedule.local_slots(settings.device, workers), on_result, run)
    return lines
