"""`kcoder tune`: run a search with a live progress line and leave its outputs in a folder.

Outputs (in `.kcoder/runs/tune-<candidate>-<stamp>/` beside the problem unless --out-dir):
the tuned file (`<candidate>_tuned.py`, plus --out FILE when given), table.md, table.json,
tune.png, and points/ (every judged point's file). The user's candidate is only read; it is
replaced only when --out names it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from kcoder.settings import Settings
from kcoder.tune.engine import TuneOptions, TuneResult, tune


def output_dir(problem: Path, candidate: Path, settings: Settings) -> Path:
    """A fresh folder for this tuning's outputs."""
    base = settings.runs_base(problem)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder, n = base / f"tune-{candidate.stem}-{stamp}", 1
    while folder.exists():
        folder, n = base / f"tune-{candidate.stem}-{stamp}-{n}", n + 1
    return folder


def write_tuned(result: TuneResult, folder: Path, candidate: Path, out: Path | None) -> list[Path]:
    """The tuned file in the output folder, and at `out` when given."""
    if result.best_source is None:
        return []
    written = [folder / f"{candidate.stem}_tuned.py"]
    written[0].write_text(result.best_source)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(result.best_source)
        written.append(out)
    return written


def exit_code(result: TuneResult) -> int:
    """0: a valid best whose plain check (when run) passed; 1 otherwise."""
    if result.best is None:
        return 1
    return 0 if result.final is None or result.final.correct else 1


class Progress:
    """A rich live line on stderr: points done, best so far, ETA (plain lines when piped)."""

    def __init__(self, quiet: bool) -> None:
        from kcoder.ui import console

        self.console = console(stderr=True)
        self.quiet = quiet
        self.status: Any = None
        self.total = "?"

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        if self.quiet:
            return
        if kind == "start":
            budget = [f"{data['trials']} trials" if data["trials"] else "", f"{data['time_s']:.0f} s" if data["time_s"]
                      else ""]
            self.total = str(min(data["trials"] or data["size"], data["size"]))
            self.console.print(f"tuning: {data['size']} points, strategy {data['strategy']}, "
                               f"{data['jobs']} parallel build(s)"
                               + (f", budget {' and '.join(b for b in budget if b)}" if any(budget) else ""))
            self.status = self.console.status("tuning ...")
            self.status.start()
        elif kind == "point":
            p, best = data["point"], data["best"]
            best_text = f"best {best.time_us:.1f} us" if best else "no valid point yet"
            eta = data.get("eta_s")
            line = (f"{data['done']}/{self.total} points, {best_text}"
                    + (f", ETA {eta:.0f} s" if eta is not None else ""))
            self.status.update(line)
            tag = f"{p.time_us:.1f} us" if p.valid else f"{p.status}: {p.reason[:70]}"
            self.console.print(f"  {' '.join(f'{k}={v}' for k, v in p.config.items())}: {tag}"
                               + (" (cached)" if p.cached else ""), markup=False, highlight=False, soft_wrap=True)
        elif kind == "profile" and self.status is not None:
            self.status.update(f"Nsight Compute metrics for the {data['top']} fastest point(s) ...")
        elif kind == "final" and self.status is not None:
            self.status.update("best point: verifying it built as plain load_inline builds it ...")

    def close(self) -> None:
        if self.status is not None:
            self.status.stop()


def tune_from_cli(problem: Path, candidate: Path, options: dict[str, Any]) -> int:
    """`kcoder tune`'s options (named as the CLI declares them) -> settings, search, outputs."""
    from kcoder.settings import default_device, parse_allow

    if options["trials"] is not None and options["trials"] < 1:
        raise ValueError("--trials must be at least 1")
    if options["time_s"] is not None and options["time_s"] <= 0:
        raise ValueError("--time must be positive")
    if options["profile_top"] < 0:
        raise ValueError("--profile-top must be 0 or more")
    settings = Settings(device=options["device"] or default_device(), allow=parse_allow(options["allow"]),
                        precision=options["precision"], budget=options["budget"], sandbox=options["sandbox"])
    topts = TuneOptions(strategy=options["strategy"], trials=options["trials"], time_s=options["time_s"],
                        seed=options["seed"], jobs=options["jobs"], use_cache=not options["no_cache"],
                        compare_compile=not options["no_compile"], profile_top=options["profile_top"])
    return run_tune(problem, candidate, settings, topts, options["out"], options["out_dir"], options["as_json"])


def run_tune(problem: Path, candidate: Path, settings: Settings, topts: TuneOptions, out: Path | None = None,
             out_dir: Path | None = None, as_json: bool = False) -> int:
    """The command's body; raises ProblemError/ValueError (SpaceError) for bad input."""
    from kcoder.tune.report import importance, markdown_table, summary_lines, to_json, write_outputs
    from kcoder.tune.space import load_space

    settings.validate()
    load_space(candidate)  # a bad declaration fails before any folder is made
    folder = out_dir or output_dir(problem, candidate, settings)
    folder.mkdir(parents=True, exist_ok=True)
    progress = Progress(quiet=False)
    try:
        result = tune(problem, candidate, settings.eval_options(), topts, folder, progress)
    finally:
        progress.close()
    tuned = write_tuned(result, folder, candidate, out)
    paths = write_outputs(result, folder)
    if as_json:
        data = to_json(result, importance(result))
        data["outputs"] = {"dir": str(folder), "tuned": [str(p) for p in tuned],
                           **{k: str(v) for k, v in paths.items()}}
        print(json.dumps(data, default=str))
    else:
        from kcoder.ui import console

        con = console()
        con.print("\n".join(summary_lines(result)), markup=False, soft_wrap=True)
        con.print(markdown_table(result, limit=20), markup=False, soft_wrap=True)
        con.print(f"outputs in {folder}" + (f"; tuned file {tuned[-1]}" if tuned else ""), markup=False)
    return exit_code(result)
