"""kcoder as a training environment: KernelEnv (a step API over optimize's loop and judge),
rollouts of a policy into chat-format JSONL, and synthesized KernelBench-format tasks.

`from kcoder.env import KernelEnv`; loaded on first use, so the CLI's import of kcoder.env.cli
stays light."""

from __future__ import annotations

from typing import Any

__all__ = ["KernelEnv"]


def __getattr__(name: str) -> Any:
    if name == "KernelEnv":
        from kcoder.env.kernel_env import KernelEnv

        return KernelEnv
    raise AttributeError(f"module 'kcoder.env' has no attribute {name!r}")
