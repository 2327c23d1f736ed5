"""A suite's live progress: a rich bar (problems done of all, elapsed, the last result) on a
terminal, and one line per finished problem (also in logs and pipes)."""

from __future__ import annotations

from typing import Any

from kcoder.suite.metrics import verdict_of


def result_line(record: dict[str, Any]) -> str:
    """One finished problem: "✓ softmax_rows: accepted, 1.80x vs eager, 1.43x vs compile (cuda:0, 31.2 s)"."""
    v = verdict_of(record)
    correct = v is not None and v.correct
    mark = "✓" if correct else "–" if record.get("status") == "out_of_reach" else "✗"
    parts = [f"{mark} {record['name']}: {record.get('status', '?')}"]
    if v is not None and v.speedup_vs_eager is not None:
        parts.append(f"{v.speedup_vs_eager:.2f}x vs eager")
    if v is not None and v.speedup_vs_compile is not None:
        parts.append(f"{v.speedup_vs_compile:.2f}x vs compile")
    if v is not None and v.candidate_sol_fraction is not None:
        parts.append(f"{100 * v.candidate_sol_fraction:.0f}% of SOL")
    if not correct and record.get("reason"):
        parts.append(str(record["reason"])[:100])
    return ", ".join(parts) + f" ({record.get('slot', '?')}, {record.get('seconds') or 0:.1f} s)"


class SuiteProgress:
    """Told when the suite starts, of each result, and when it stops."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.bar: Any = None
        self.task: Any = None

    def start(self, total: int, already: int) -> None:
        if already:
            self.console.print(f"resuming: {already} of {total} problems already have a result")
        if not self.console.is_terminal:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("suite"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TextColumn("{task.description}"), console=self.console, transient=True)
        self.bar.start()
        self.task = self.bar.add_task("", total=total, completed=already)

    def note(self, text: str) -> None:
        self.console.print(text)

    def result(self, record: dict[str, Any]) -> None:
        from rich.text import Text

        self.console.print(Text(result_line(record)), soft_wrap=True)
        if self.bar is not None:
            self.bar.update(self.task, advance=1, description=record["name"])

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
