"""Terminal rendering: verdict tables and one-line messages (rich, NO_COLOR respected)."""

from __future__ import annotations

import os
from typing import Any

from kcoder.verdict import Verdict


def console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, no_color=bool(os.environ.get("NO_COLOR")), highlight=False)


def _us(value: float | None, spread: float | None = None) -> str:
    if value is None:
        return "-"
    text = f"{value:,.1f} us"
    return f"{text} (IQR {spread:,.1f})" if spread is not None else text


def _ratio(value: float | None, ci: list[float] | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}x" + (f"  [90% CI {ci[0]:.2f}-{ci[1]:.2f}]" if ci else "")


def verdict_table(v: Verdict) -> Any:
    """A two-column table summarising a verdict."""
    from rich.table import Table

    ok = v.correct
    title = ("[green]ACCEPTED[/]" if ok and v.stage == "done" else
             "[green]CORRECT[/]" if ok else "[red]REJECTED[/]") + f"  reward {v.reward}"
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")
    rows = [
        ("candidate", v.candidate), ("problem", v.problem),
        ("device", f"{v.device} ({v.device_name}), torch {v.torch_version}"),
        ("policy", f"precision {v.precision}; allow {', '.join(v.allow) or 'none'}"),
        ("stage", v.stage), ("reason", v.reason),
    ]
    if v.correct:
        rows += [
            ("max abs / rel err", f"{v.max_abs_err:.3g} / {v.max_rel_err:.3g} (norm {v.rel_norm_err:.3g})"
             if v.max_abs_err is not None else "-"),
        ]
    if v.candidate_us is not None:
        rows += [
            ("eager", _us(v.eager_us, v.eager_iqr_us)),
            ("torch.compile", _us(v.compile_us, v.compile_iqr_us)),
            ("candidate", _us(v.candidate_us, v.candidate_iqr_us)),
            ("speed-up vs eager", _ratio(v.speedup_vs_eager, v.speedup_vs_eager_ci)),
            ("speed-up vs compile", _ratio(v.speedup_vs_compile, v.speedup_vs_compile_ci)),
            ("timed rounds", str(v.timing_rounds)),
        ]
    for note in v.notes:
        rows.append(("note", note))
    for key, value in rows:
        table.add_row(key, str(value))
    return table
