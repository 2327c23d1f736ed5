"""A run's report: the data of report.json (report.md is rendered from it by the workspace)
and the final summary table `kcoder optimize` prints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kcoder import ui
from kcoder.agent.loop import RunResult
from kcoder.verdict import Verdict, plain_build_ok
from kcoder.workspace import Workspace


def build_report(ws: Workspace, result: RunResult, *, model: str, profile: str, device: str,
                 target: float) -> dict[str, Any]:
    """The data of report.json; "best" holds the best verified candidate's verdict."""
    best = result.best
    n_candidates = len(list((ws.root / "candidates").glob("model_new_*.py")))
    return {
        "problem": ws.problem_path().name, "problem_path": str(ws.problem_path()),
        "run_dir": str(ws.root), "status": result.status, "message": result.message,
        "target": target, "target_reached": result.target_reached, "model": model,
        "profile": profile, "device": device, "device_name": best.device_name if best else "",
        "turns": result.turns, "prompt_tokens": result.usage.prompt_tokens,
        "completion_tokens": result.usage.completion_tokens, "cost": result.usage.cost,
        "llm_calls": result.usage.calls, "retries": result.usage.retries,
        "seconds": round(result.seconds, 1), "candidates_evaluated": n_candidates,
        "best_path": str(ws.best_dir / "model_new.py") if best else None,
        "best": best.to_dict() if best else None,
        "reference": ws.preflight(),  # the preflight's baselines and speed of light
    }


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _plain_build_row(plain: str | None) -> str:
    if plain is None:
        return "-"
    return "verified (built as plain load_inline builds it)" if plain == "verified" else f"FAILED: {plain}"


def _sol_row(reference: dict[str, Any] | None, best: Verdict | None) -> str:
    """The SOL and how close the best candidate (else torch.compile) came to it."""
    sol = (best.sol_us if best else None) or (reference or {}).get("sol_us")
    if not sol:
        return "-"
    if best and best.candidate_sol_fraction is not None:
        return f"{sol:,.1f} us; the best candidate reaches {100 * best.candidate_sol_fraction:.0f}% of it"
    compile_us = (reference or {}).get("compile_us")
    return f"{sol:,.1f} us" + (f"; torch.compile reaches {100 * sol / compile_us:.0f}% of it" if compile_us else "")


def commit_record(verdict: Verdict, model: str, problem_stem: str) -> dict[str, Any]:
    """What a commit of an accepted kernel records (report.json in the commit; the message's
    speed-ups and trailers): its verdict, the model and the problem."""
    return {**verdict.to_dict(), "model": model, "problem": problem_stem}


def print_summary(out: ui.Output, report: dict[str, Any]) -> None:
    """The final table: outcome, best candidate, its speed-ups, model, usage."""
    from rich.table import Table
    from rich.text import Text

    best = Verdict.from_dict(report["best"]) if report.get("best") else None
    title = ("[red]FAILS WHEN BUILT BY PLAIN load_inline[/]" if best and not plain_build_ok(best) else
             "[green]TARGET REACHED[/]" if report["target_reached"] else
             "[green]VERIFIED CANDIDATE[/]" if best else "[red]NO VERIFIED CANDIDATE[/]")
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value")
    rows = [
        ("outcome", f"{report['status']}: {report['message']}"),
        ("best", report["best_path"] or "-"),
        ("verdict", best.reason if best else "-"),
        ("vs eager", _x(best.speedup_vs_eager if best else None)),
        ("vs torch.compile", f"{_x(best.speedup_vs_compile if best else None)} (target {report['target']:.2f}x)"),
        ("plain build", _plain_build_row(best.plain_build if best else None)),
        ("batch sizes", best.shapes if best and best.shapes else "not checked"),
        ("speed of light", _sol_row(report.get("reference"), best)),
        ("model", f"{report['model']} ({report['profile']})"),
        ("turns", str(report["turns"])),
        ("tokens", f"{report['prompt_tokens']:,} in / {report['completion_tokens']:,} out"),
        ("cost", f"${report['cost']:.4f}"),
        ("report", str(Path(report["run_dir"]) / "report.md")),
    ]
    sizes = report.get("sizes")
    if sizes:
        from kcoder.agent.sizes import size_lines

        rows.insert(7, ("by batch size", "\n".join(size_lines(sizes["rows"], sizes["name"]))))
    policy = report.get("policy") or {}
    if policy.get("kernels"):
        rows.insert(6, ("kernels", "\n".join(policy["kernels"])))
    if policy.get("error"):
        rows.insert(6, ("policy", policy["error"]))
    for name, value in rows:
        table.add_row(name, Text(value))  # Text: a verdict reason may hold [brackets]
    out.print()
    out.print(table)
