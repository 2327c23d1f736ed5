"""One rollout episode: a policy (kcoder's built-in one, or a model through litellm) plays a
KernelEnv to its end; the record holds the conversation in the OpenAI chat format, the tools,
the reward after every step and the final verdict.

`python -m kcoder.env.episode SPEC.json RECORD.json` runs one in a process of its own (the
suite's backends start it on the device their slot pins), with the problem's source carried in
the spec, so an episode runs on any node without a shared file system.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kcoder.settings import Settings

BUILTIN = "builtin"
_VERDICT_KEYS = ("status", "stage", "correct", "reward", "reason", "speedup_vs_eager", "speedup_vs_compile")


def make_brain(policy: str, env: Any, settings: Settings) -> tuple[Any, int | None]:
    """The policy's model for `env` (after its reset) and its context budget (None: no limit)."""
    if policy == BUILTIN:
        from kcoder.policy.driver import PolicyModel

        return PolicyModel(env.workspace, settings), None
    from kcoder.agent.assemble import resolve_model
    from kcoder.agent.llm import LLM

    profile, _ = resolve_model(settings)
    llm = LLM(model=policy, api_base=settings.api_base, tool_mode=env.tool_mode, temperature=profile.temperature,
              max_output_tokens=profile.max_output_tokens, stream=settings.stream)
    return llm, max(8_000, profile.context_window - profile.max_output_tokens - 2_000)


def tool_mode_for(policy: str, settings: Settings) -> str:
    """native for the built-in policy; the model's profile decides for a model."""
    if policy == BUILTIN:
        return "native"
    from kcoder.agent.assemble import resolve_model

    return resolve_model(settings)[1]  # ValueError: a missing key, an unknown profile


def play(problem: Path, settings: Settings, policy: str, *, seed: int | None = None,
         evaluate: Any = None) -> dict[str, Any]:
    """Run one episode of `policy` on `problem`; the episode's record (see the module doc)."""
    from kcoder.agent.llm import LLMError
    from kcoder.agent.loop import fit_context
    from kcoder.env.kernel_env import KernelEnv

    started = time.perf_counter()
    settings.model = None if policy == BUILTIN else policy
    env = KernelEnv.from_settings(problem, settings, tool_mode=tool_mode_for(policy, settings),
                                  evaluate=evaluate, label=policy)
    steps: list[dict[str, Any]] = []
    last: dict[str, Any] | None = None  # the last verdict, the final one when none was correct
    try:
        _, info = env.reset(seed=seed)
        brain, budget = make_brain(policy, env, settings)
        done = False
        while not done:
            messages = fit_context(env.messages, budget) if budget else env.messages
            try:
                reply = brain.query(messages, env.tools)
            except LLMError as exc:
                env.end("llm_error", str(exc))
                info = env.info()
                break
            _, reward, term, trunc, info = env.step(reply.message)
            done = term or trunc
            last = info["verdicts"][-1] if info["verdicts"] else last
            steps.append({"turn": info["turn"], "reward": reward, "terminated": term, "truncated": trunc,
                          "verdicts": [{k: v.get(k) for k in _VERDICT_KEYS} for v in info["verdicts"]]})
        return {"problem": problem.name, "policy": policy, "device": settings.device, "seed": seed,
                "messages": env.messages, "tools": env.tools, "rewards": [s["reward"] for s in steps],
                "reward": float(env.reward()), "status": info.get("status"), "message": info.get("message"),
                "verdict": info.get("best") or last, "steps": steps, "turns": info.get("turn"),
                "usage": vars(brain.usage), "seconds": round(time.perf_counter() - started, 2)}
    finally:
        env.close()


def run_spec(spec: dict[str, Any], evaluate: Any = None) -> dict[str, Any]:
    """Run the episode a rollout spec describes, in a private folder; never raises.
    `evaluate` replaces kcoder's judge (tests)."""
    from kcoder.suite.task import _settings_fields

    record: dict[str, Any] = {"name": spec["name"], "mode": "rollout", "problem": spec["problem"],
                              "episode": spec["episode"]}
    with tempfile.TemporaryDirectory(prefix="kcoder-episode-") as tmp:
        problem = Path(tmp) / Path(spec["problem"]).name
        problem.write_text(spec["problem_source"])
        settings = Settings(**_settings_fields(spec["settings"]))
        settings.runs_dir = Path(tmp) / "runs"
        try:
            record.update(play(problem, settings, spec["policy"], seed=spec.get("seed"), evaluate=evaluate))
            record["problem"] = spec["problem"]
        except Exception as exc:  # a bad problem, a missing key, kcoder's own failure: that episode's record
            record.update(status="error", reason=f"{type(exc).__name__}: {exc}".replace(str(problem),
                                                                                        spec["problem"])[:300])
    record["node"] = os.uname().nodename
    return record


def main() -> None:
    from kcoder.suite.schedule import pin_to_slot

    pin_to_slot()
    record = run_spec(json.loads(Path(sys.argv[1]).read_text()))
    tmp = Path(sys.argv[2] + ".tmp")
    tmp.write_text(json.dumps(record, default=str))
    os.replace(tmp, sys.argv[2])


if __name__ == "__main__":
    main()
