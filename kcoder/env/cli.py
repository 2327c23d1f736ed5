"""`kcoder rollout` and `kcoder synth`: registered on the main app by `register` (kcoder/cli.py
stays thin); the work is in rollout.py and synth.py."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from kcoder.cli_options import (
    ALLOW,
    API_BASE,
    DEVICE,
    MAX_COST,
    MAX_TIME,
    NO_PREFLIGHT,
    PRECISION,
    PROFILE,
    SANDBOX,
    TOOL_CALL,
    DeviceOpt,
    JsonOpt,
    option,
    with_options,
)
from kcoder.settings import DEFAULT_BUDGET_S, DEFAULT_TARGET

ROLLOUT_ONLY = ("policy", "episodes", "out", "seed", "backend", "ray_address", "workers", "as_json")

ROLLOUT_OPTIONS = (
    option("model", Annotated[str | None, typer.Option(help="litellm model that plays the episodes.")]),
    option("policy", Annotated[str | None, typer.Option(help="builtin: kcoder's built-in policy plays them.")]),
    option("episodes", Annotated[int, typer.Option(help="Episodes per problem.")], 1),
    option("out", Annotated[Path | None, typer.Option(help="Output folder (.kcoder/rollouts/rollout-<stamp>).")]),
    option("seed", Annotated[int, typer.Option(help="Seed of the first episode (episode k gets seed + k).")], 0),
    option("backend", Annotated[Literal["pool", "ray"], typer.Option(
        help="pool (local processes, one device each) or ray (local runtime or --ray-address).")], "pool"),
    option("ray_address", Annotated[str | None, typer.Option(help="An existing Ray cluster's address.")]),
    option("workers", Annotated[int | None, typer.Option(
        help="Concurrent episodes (default: one per GPU; cpu: one per 8 cores).")]),
    API_BASE, DEVICE, ALLOW, PRECISION, SANDBOX, PROFILE, TOOL_CALL,
    option("target", Annotated[float, typer.Option(help="End an episode at this speed-up over torch.compile.")],
           DEFAULT_TARGET),
    option("max_turns", Annotated[int, typer.Option(help="Turns per episode.")], 30),
    MAX_COST, MAX_TIME,
    option("budget", Annotated[float, typer.Option(help="Measured seconds per implementation.")], DEFAULT_BUDGET_S),
    option("no_compile", Annotated[bool, typer.Option("--no-compile", help="No torch.compile baseline.")], False),
    option("tune_trials", Annotated[int | None, typer.Option(help="builtin: points its tuning judges.")]),
    NO_PREFLIGHT, option("as_json", JsonOpt, False))


def rollout_command(make_settings: Callable[..., Any], bad_input: Callable[[str, bool], None],
                    problems: list[str], options: dict[str, Any]) -> int:
    """Run the rollout the options describe; the exit code (1 when an episode failed to run)."""
    from kcoder.env.rollout import run_rollout

    model, policy = options.pop("model"), options.pop("policy")
    if bool(model) == bool(policy) or policy not in (None, "builtin"):
        bad_input("give either --model MODEL or --policy builtin", options["as_json"])
    fields = {k: v for k, v in options.items() if k not in ROLLOUT_ONLY}
    try:
        settings = make_settings(model=model, **fields)
        settings.validate()
        if not problems:
            raise ValueError("no PROBLEMS given (files, folders or globs)")
        out_dir = options["out"] or Path(".kcoder") / "rollouts" / f"rollout-{time.strftime('%Y%m%d-%H%M%S')}"
        quiet = options["as_json"]
        lines = run_rollout(problems, settings, policy=model or "builtin", episodes=options["episodes"],
                            out_dir=out_dir, seed=options["seed"], backend=options["backend"],
                            ray_address=options["ray_address"], workers=options["workers"],
                            on_line=None if quiet else _print_line)
    except ValueError as exc:
        bad_input(str(exc), options["as_json"])
        return 2
    if options["as_json"]:
        print(json.dumps({"out_dir": str(out_dir), "episodes": lines}, default=str))
    else:
        print(f"{len(lines)} episode(s) in {out_dir / 'episodes'}; index {out_dir / 'rollouts.jsonl'}")
    return 1 if any(line.get("status") == "error" for line in lines) else 0


def _print_line(line: dict[str, Any]) -> None:
    reward = line.get("reward")
    print(f"{line['name']}: {line.get('status')}, reward {reward}, {line.get('turns')} turns, "
          f"{line.get('seconds', 0):.0f} s" + (f" ({line['reason']})" if line.get("reason") else ""), flush=True)


SYNTH_OPTIONS = (
    option("n", Annotated[int, typer.Option("--n", help="Problems to write.")], 20),
    option("out", Annotated[Path, typer.Option(help="Output folder (problems + manifest.json).")], Path("synth")),
    option("device", DeviceOpt),
    option("seed", Annotated[int, typer.Option(help="Seed of the compositions.")], 0),
    option("ops", Annotated[Path | None, typer.Option(help="A JSON catalogue of ops to use instead of kcoder's.")]),
    option("kernelbench", Annotated[Path | None, typer.Option(
        help="A KernelBench checkout: drop compositions whose op sequence one of its problems has.")]),
    option("min_ms", Annotated[float, typer.Option(help="Least eager time kept (ms).")], 1.0),
    option("max_ms", Annotated[float, typer.Option(help="Most eager time kept (ms).")], 100.0),
    option("jobs", Annotated[int, typer.Option(help="Checks run side by side (the same problems are kept).")], 1),
    option("as_json", JsonOpt, False))


def synth_command(bad_input: Callable[[str, bool], None], options: dict[str, Any]) -> int:
    from kcoder.env.synth import SynthOptions, synthesize
    from kcoder.settings import default_device

    as_json = options.pop("as_json")
    try:
        opts = SynthOptions(**{**options, "device": options["device"] or default_device()})
        manifest = synthesize(opts, on_task=None if as_json else _print_task)
    except ValueError as exc:
        bad_input(str(exc), as_json)
        return 2
    if as_json:
        print(json.dumps(manifest, default=str))
    else:
        print(f"{len(manifest['tasks'])} problem(s) in {opts.out} ({len(manifest['rejected'])} compositions "
              f"rejected); manifest {opts.out / 'manifest.json'}")
    return 0 if len(manifest["tasks"]) == opts.n else 1


def _print_task(task: dict[str, Any]) -> None:
    if "file" in task:
        print(f"{task['file']}: {' -> '.join(task['ops'])}, eager {task['eager_ms']:.2f} ms", flush=True)


def register(app: typer.Typer, make_settings: Callable[..., Any], bad_input: Callable[[str, bool], None]) -> None:
    """Add `rollout` and `synth` to `app`."""

    @app.command("rollout")
    @with_options(*ROLLOUT_OPTIONS)
    def rollout(problems: Annotated[list[str] | None, typer.Argument(
            help="Problem files, folders or globs.")] = None, **options: Any) -> None:
        """Run episodes of a policy (--model or --policy builtin) on PROBLEMS; one OpenAI chat-format
        JSONL per episode with per-step rewards and the final verdict (SFT/RL data)."""
        raise typer.Exit(rollout_command(make_settings, bad_input, problems or [], options))

    @app.command("synth")
    @with_options(*SYNTH_OPTIONS)
    def synth(**options: Any) -> None:
        """Write N KernelBench-format problems composed from a catalogue of torch ops, each checked
        in a child process (runs, deterministic, eager time in range, not constant), with a manifest."""
        raise typer.Exit(synth_command(bad_input, options))

