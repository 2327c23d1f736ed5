"""A suite's plots (PNG, matplotlib's Agg backend: files only, no display):
speedup_vs_compile.png (the distribution over correct problems), fast_p.png (fast_p against
the threshold p, vs eager and vs torch.compile) and problems.png (each problem's eager,
torch.compile and kernel time in units of its speed of light, with the SOL line at 1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_plots(out_dir: Path, rows: list[dict[str, Any]], summary: dict[str, Any]) -> list[Path]:
    """The three plots; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = [out_dir / "speedup_vs_compile.png", out_dir / "fast_p.png", out_dir / "problems.png"]
    for path, draw in zip(paths, (_speedups, _fast_p, _problems), strict=True):
        fig, ax = plt.subplots(figsize=(8, 4.5))
        draw(ax, rows)
        ax.set_title(f"{ax.get_title()} ({summary.get('device_name') or summary.get('device', '')})", fontsize=10)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
    return paths


def _speedups(ax: Any, rows: list[dict[str, Any]]) -> None:
    values = [r["speedup_vs_compile"] for r in rows if r["correct"] and r["speedup_vs_compile"]]
    if values:
        import numpy as np

        low, high = min(min(values), 0.5), max(max(values), 2.0)
        ax.hist(values, bins=np.geomspace(low, high, 20), color="tab:blue", edgecolor="white")
        ax.set_xscale("log")
    else:
        ax.text(0.5, 0.5, "no correct, timed problem", ha="center", va="center", transform=ax.transAxes)
    ax.axvline(1.0, color="gray", linestyle="--", label="torch.compile")
    ax.axvline(1.05, color="tab:green", linestyle=":", label="target 1.05x")
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("speed-up vs torch.compile")
    ax.set_ylabel("problems")
    ax.set_title(f"Speed-up vs torch.compile, {len(values)} correct problems")
    ax.legend()


def _fast_p(ax: Any, rows: list[dict[str, Any]]) -> None:
    from kcoder.suite.metrics import fast_p

    grid = [i / 20 for i in range(0, 61)]  # p from 0 to 3
    for key, label in (("speedup_vs_eager", "vs eager"), ("speedup_vs_compile", "vs torch.compile")):
        ax.plot(grid, [fast_p(rows, key, p) for p in grid], label=label)
    ax.set_xlabel("threshold p (speed-up)")
    ax.set_ylabel("fast_p: correct and faster than p (%)")
    ax.set_ylim(0, 100)
    ax.set_title("fast_p")
    ax.legend()


def _problems(ax: Any, rows: list[dict[str, Any]]) -> None:
    shown = [r for r in rows if r["sol_us"]]
    width = 0.27
    for i, (key, label) in enumerate((("eager_us", "eager"), ("compile_us", "torch.compile"),
                                      ("candidate_us", "kernel"))):
        xs = [j + (i - 1) * width for j in range(len(shown))]
        ax.bar(xs, [r[key] / r["sol_us"] if r[key] else float("nan") for r in shown], width, label=label)
    ax.axhline(1.0, color="black", linewidth=1, label="speed of light")
    ax.set_xticks(range(len(shown)), [r["name"] for r in shown], rotation=30, ha="right", fontsize=8)
    if shown:
        ax.set_yscale("log")
    ax.set_ylabel("time / speed-of-light time")
    ax.set_title("Per problem, in units of its speed of light")
    ax.legend(fontsize=8)
