"""What a tuning run leaves behind: the compact table (markdown, the agent's view), JSON, and a
PNG plot (time per trial with the running best; parameter importance when it means something).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from kcoder.tune.engine import PointResult, TuneResult
from kcoder.tune.ncu import NCU_HEAD, table_cells

MIN_IMPORTANCE_TRIALS = 4  # fewer valid points say nothing about which knob matters


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _cfg(config: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def ranked(points: list[PointResult]) -> list[PointResult]:
    """Valid points fastest first, then the invalid ones in trial order."""
    valid = sorted((p for p in points if p.valid), key=lambda p: p.time_us or 0.0)
    return valid + [p for p in points if not p.valid]


def summary_lines(result: TuneResult) -> list[str]:
    """The headline: strategy, counts, best against the hand-picked config, the plain check."""
    valid = sum(p.valid for p in result.points)
    cached = sum(p.cached for p in result.points)
    lines = [f"strategy {result.strategy}: {len(result.points)} points ({valid} valid, {cached} from cache, "
             f"{result.evaluated} judged now) in {result.seconds:.1f} s; stopped: {result.stopped}"]
    if result.best is None:
        lines.append("no valid point: every point failed its build, verification or a constraint")
        return lines
    hand = result.hand_picked
    lines.append(f"best: {_cfg(result.best.config)} at {_us(result.best.time_us)} us"
                 + (f"; hand-picked {_cfg(hand.config)} at {_us(hand.time_us)} us "
                    f"({result.speedup_over_hand_picked:.2f}x)" if hand and hand.valid else
                    f"; hand-picked config {hand.status}: {hand.reason}" if hand else ""))
    lines += result.notes
    final = result.final
    if final:
        vs = final.speedup_vs_compile
        lines.append("best file, built as plain load_inline builds it: "
                     + (f"verified, {_us(final.candidate_us)} us, vs eager "
                        f"{final.speedup_vs_eager or 0:.2f}x"
                        + (f", vs torch.compile {vs:.2f}x" if vs else "") if final.correct
                        else f"FAILED: {final.reason}")
                     + (" (cached)" if result.final_cached else ""))
    return lines


def markdown_table(result: TuneResult, limit: int | None = None) -> str:
    """The points as a markdown table, fastest first; `limit` keeps the top rows (the rest are
    counted) so the agent's observation stays short."""
    resources = any(p.registers is not None for p in result.points)
    profiled = any(p.ncu for p in result.points)
    head = ["#", "config", "status", "time us", "iqr us", "vs eager", "vs best"]
    head += ["regs", "spill B"] if resources else []
    head += NCU_HEAD if profiled else []
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    best = result.best.time_us if result.best else None
    points = ranked(result.points)
    shown = points if limit is None else points[:limit]
    for p in shown:
        rel = f"{p.time_us / best:.2f}x" if p.valid and best else "-"
        status = p.status if p.valid else f"{p.status}: {p.reason[:80]}"
        row = [str(p.trial or "-"), _cfg(p.config), status + (" (cached)" if p.cached else ""),
               _us(p.time_us), _us(p.iqr_us), f"{p.speedup_vs_eager:.2f}x" if p.speedup_vs_eager else "-", rel]
        row += [str(p.registers if p.registers is not None else "-"), str(p.spills if p.spills is not None else "-")] \
            if resources else []
        row += table_cells(p) if profiled else []
        rows.append("| " + " | ".join(r.replace("|", "/") for r in row) + " |")
    if len(shown) < len(points):
        rows.append(f"({len(points) - len(shown)} more points in table.md)")
    return "\n".join(rows)


def to_json(result: TuneResult, importance: dict[str, float] | None = None) -> dict[str, Any]:
    return {"problem": result.problem, "candidate": result.candidate, "strategy": result.strategy,
            "space": result.space, "constraints": result.constraints, "stopped": result.stopped,
            "seconds": result.seconds, "evaluated": result.evaluated, "identity": result.identity,
            "best": result.best.to_dict() if result.best else None,
            "hand_picked": result.hand_picked.to_dict() if result.hand_picked else None,
            "speedup_over_hand_picked": result.speedup_over_hand_picked,
            "final": {**result.final.to_dict(), "cached": result.final_cached} if result.final else None,
            "importance": importance or {}, "points": [p.to_dict() for p in result.points]}


def importance(result: TuneResult) -> dict[str, float]:
    """optuna's fANOVA importance of each parameter over the valid points (any strategy's),
    or {} when there are too few of them or only one knob varies."""
    valid = [p for p in result.points if p.valid]
    varying = [n for n, values in result.space.items() if len(values) > 1]
    if len(valid) < MIN_IMPORTANCE_TRIALS or len(varying) < 2:
        return {}
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists = {n: optuna.distributions.CategoricalDistribution(result.space[n]) for n in varying}
    study = optuna.create_study(direction="minimize")
    for p in valid:
        study.add_trial(optuna.trial.create_trial(params={n: p.config[n] for n in varying},
                                                  distributions=dists, value=p.time_us))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return {k: round(float(v), 4) for k, v in optuna.importance.get_param_importances(study).items()}
    except (RuntimeError, ValueError, ZeroDivisionError):
        return {}  # e.g. every valid point took exactly the same time


def write_outputs(result: TuneResult, out_dir: Path) -> dict[str, Path]:
    """table.md, table.json, tune.png (and the tuned file, written by the caller) in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    imp = importance(result)
    paths = {"markdown": out_dir / "table.md", "json": out_dir / "table.json", "plot": out_dir / "tune.png"}
    paths["markdown"].write_text("\n".join(summary_lines(result)) + "\n\n" + markdown_table(result) + "\n"
                                 + ("\nparameter importance (fANOVA): "
                                    + ", ".join(f"{k} {v:.2f}" for k, v in imp.items()) + "\n" if imp else ""))
    paths["json"].write_text(json.dumps(to_json(result, imp), indent=2, default=str))
    plot(result, imp, paths["plot"])
    return paths


def plot(result: TuneResult, imp: dict[str, float], path: Path) -> None:
    """Time per trial (invalid points marked at the bottom) with the running best; importance
    bars beside it when known."""
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, 2 if imp else 1, figsize=(11 if imp else 7, 4), squeeze=False)
    ax = axes[0][0]
    counted = [p for p in result.points if p.trial]
    ok = [p for p in counted if p.valid]
    ax.scatter([p.trial for p in ok], [p.time_us for p in ok], s=18, label="valid point")
    running, best = [], None
    for p in counted:
        if p.valid and (best is None or p.time_us < best):  # type: ignore[operator]
            best = p.time_us
        running.append(best)
    ax.step([p.trial for p in counted], running, where="post", color="C1", label="best so far")
    bad = [p for p in counted if not p.valid]
    if bad and ok:
        floor = min(p.time_us for p in ok)  # type: ignore[type-var]
        ax.scatter([p.trial for p in bad], [floor * 0.95] * len(bad), marker="x", color="C3", label="invalid")
    ax.set(xlabel="trial", ylabel="candidate time (us)", title=f"{Path(result.candidate).name}: {result.strategy}")
    ax.legend(loc="best", fontsize=8)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    if imp:
        bar = axes[0][1]
        names = list(imp)[::-1]
        bar.barh(names, [imp[n] for n in names], color="C2")
        bar.set(xlabel="importance (fANOVA)", title="parameter importance")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
