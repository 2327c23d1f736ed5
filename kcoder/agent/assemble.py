"""The one place an agent is made, for `kcoder optimize` and `kcoder chat` alike: the model
(litellm, through its profile), the tools, what they may touch, the limits, the context
budget, the system prompt, the meta record and the renderer of its events."""

from __future__ import annotations

import time
from typing import Any, Literal

from kcoder import ui
from kcoder.agent import prompts
from kcoder.agent.events import RunView
from kcoder.agent.llm import LLM, missing_key_message
from kcoder.agent.loop import Agent, Limits
from kcoder.agent.profiles import Profile, concrete_tool_call_mode, resolve_profile
from kcoder.agent.skills import SkillCatalog
from kcoder.agent.status import evaluator_with_status, profiler_with_status
from kcoder.agent.toolbox import Evaluator, Profiler, Toolbox, ToolContext
from kcoder.settings import BUILTIN, Settings
from kcoder.workspace import Workspace

Mode = Literal["optimize", "chat"]


def resolve_model(settings: Settings) -> tuple[Profile, str]:
    """The model's profile and its concrete tool-call mode (native or text). ValueError names
    what is wrong: an unknown profile or tool-call mode, a missing API key."""
    llm_model = "" if settings.model == BUILTIN else settings.model or ""
    profile = resolve_profile(llm_model, settings.profile, settings.tool_call)
    if not llm_model:  # the built-in policy, or chat before /model: nothing to ask litellm
        return profile, "native"
    missing = missing_key_message(llm_model, settings.api_base)
    if missing:
        raise ValueError(missing)
    return profile, concrete_tool_call_mode(profile, llm_model)


def build_agent(settings: Settings, workspace: Workspace, out: ui.Output, *, mode: Mode = "optimize",
                evaluate: Evaluator | None = None, profiler: Profiler | None = None,
                llm: Any = None) -> Agent:
    """An agent for `settings` working in `workspace`, printing on `out`. `evaluate` and
    `profiler` replace kcoder's judge and profiler (tests); `llm` answers the loop's queries
    instead of the model or the built-in policy (kcoder.env feeds it the caller's actions).
    Raises ValueError like `resolve_model`."""
    profile, tool_mode = resolve_model(settings)
    if llm is not None:
        tool_mode = llm.tool_mode
    elif not settings.policy_answers(chat=mode == "chat"):
        llm = LLM(model=settings.model or "", api_base=settings.api_base, tool_mode=tool_mode,
                  temperature=profile.temperature, max_output_tokens=profile.max_output_tokens,
                  stream=settings.stream, on_text=out.assistant_text, on_notice=out.warn)
    else:  # kcoder's built-in policy answers the loop's queries
        from kcoder.policy.driver import PolicyModel

        llm, tool_mode = PolicyModel(workspace, settings, on_text=out.assistant_text), "native"
    options = settings.eval_options()
    # Every evaluation and profile shows a live status and a one-line result (agent/status.py).
    ctx = ToolContext(workspace=workspace, options=options, skills=SkillCatalog.discover(),
                      evaluate=evaluator_with_status(out, evaluate, options),
                      extra={"profile": profiler_with_status(out, profiler)})
    toolbox = Toolbox(profile.tools)
    limits = Limits(target=settings.target, keep_going=settings.keep_going, max_turns=settings.max_turns,
                    max_cost=settings.max_cost, max_time=settings.max_time)
    # What is left of the context window after the reply and a margin for the estimate.
    budget = max(8_000, profile.context_window - profile.max_output_tokens - 2_000)
    view = RunView(out, workspace=workspace, turn_rules=mode == "optimize", verbose=settings.verbose)
    return Agent(llm, toolbox, ctx, limits, context_budget=budget, on_event=view,
                 system_prompt=system_prompt(settings, ctx, toolbox, tool_mode, mode),
                 meta=_meta(settings, profile, tool_mode, mode))


def system_prompt(settings: Settings, ctx: ToolContext, toolbox: Toolbox, tool_mode: str, mode: Mode) -> str:
    """The rules, the tools (text protocol), the skills, and the notes of the mode and tools."""
    text = prompts.system_prompt(
        device=settings.device, target=settings.target, allow=settings.allow, precision=settings.precision,
        skills_listing=ctx.skills.prompt_listing() if ctx.skills else "", tool_mode=tool_mode,
        tools_text=toolbox.describe_text())
    notes = [prompts.CUDA_AGENT_NOTE] if "bash" in toolbox.names else []
    figures = ctx.workspace.preflight()  # the roofline preflight's (agent/preflight.py)
    notes += [prompts.sol_note(figures)] if figures else []
    notes += [prompts.CHAT_NOTE] if mode == "chat" else []
    return "\n\n".join([text, *notes])


def _meta(settings: Settings, profile: Profile, tool_mode: str, mode: Mode) -> dict[str, Any]:
    """The head of each session's start record in the trajectory."""
    model = BUILTIN if settings.policy_answers(chat=mode == "chat") else settings.model
    return {**({"mode": "chat"} if mode == "chat" else {}), "model": model,
            "profile": profile.name, "tool_mode": tool_mode, "device": settings.device,
            "target": settings.target, "api_base": settings.api_base,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
