"""Rendering a ProfileReport: rich tables for people, a compact text summary for the agent.

The summary is what the agent's `profile` tool returns: at most about 2k tokens (~7,500
characters), the slowest kernels first, each with its numbers, bound, stalls, compiler
resources and ncu's advice on one line each. Detail is dropped before numbers are.
"""

from __future__ import annotations

from typing import Any

from kcoder.device_limits import RooflinePoint
from kcoder.profile.ncu_parse import KernelMetrics
from kcoder.profile.profiler import ProfileReport
from kcoder.profile.ptxas import KernelResources

SUMMARY_CHARS = 7500
_RULE_ORDER = {"ERR": 0, "WRN": 1, "OPT": 2, "INF": 3}


def short_name(name: str, limit: int = 70) -> str:
    """A kernel name without its parameter list, cut to `limit` characters."""
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):
        depth += (ch == "<") - (ch == ">")
        if ch == "(" and depth == 0:
            cut = i
            break
    base = name[:cut].removeprefix("void ").strip() or name
    return base if len(base) <= limit else base[: limit - 3] + "..."


def _num(value: float | None, fmt: str = "{:.0f}", unit: str = "") -> str:
    return "-" if value is None else fmt.format(value) + unit


def _us(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e3:,.1f} us"


def _bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def _count(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"


def _dims(text: str, total: float | None) -> str:
    """'(1056, 1, 1)' -> '1056', '(32, 8, 1)' -> '32x8'; the flat count when ncu gave no shape."""
    parts = [p.strip() for p in text.strip("() ").split(",") if p.strip()]
    while len(parts) > 1 and parts[-1] == "1":
        parts.pop()
    return "x".join(parts) if parts else _num(total)


def _launch(k: KernelMetrics) -> str:
    return f"grid {_dims(k.grid, k.grid_blocks)} x block {_dims(k.block, k.block_threads)}"


def resources_text(r: KernelResources | None) -> str:
    """'30 regs, 1.0 KB smem, 0 B stack, no spills' from the compiler's entry."""
    if r is None:
        return ""
    parts = [f"{r.registers} regs" if r.registers is not None else "regs ?"]
    parts.append(f"{_bytes(r.smem_bytes)} smem")
    if r.stack_frame_bytes:
        parts.append(f"{_bytes(r.stack_frame_bytes)} stack")
    if r.source == "ptxas":
        parts.append(f"SPILLS {r.spill_store_bytes} B stored / {r.spill_load_bytes} B loaded" if r.spills
                     else "no spills")
    elif r.local_bytes:
        parts.append(f"{_bytes(r.local_bytes)} local/thread (spills or stack arrays)")
    return ", ".join(parts)


def rules_sorted(k: KernelMetrics) -> list[Any]:
    return sorted(k.rules, key=lambda r: (_RULE_ORDER.get(r.type, 4), -(r.speedup_pct or 0.0)))


def kernel_line(report: ProfileReport, k: KernelMetrics) -> str:
    """One line with a launch's main numbers and its roofline verdict."""
    point = report.roofline.get(k.id)
    occ = f"occupancy {_num(k.achieved_occupancy_pct)}% achieved / {_num(k.theoretical_occupancy_pct)}% theoretical"
    regs = f"{_num(k.registers)} regs/thread, {_bytes(k.smem_per_block)} smem/block"
    head = (f"#{k.id} {short_name(k.name)}: {_us(k.duration_ns)} | SM {_num(k.sm_pct)}% DRAM {_num(k.dram_pct)}% | "
            f"{occ} | {regs} | {_launch(k)}")
    if point:
        head += (f" | {_bytes(point.bytes)} DRAM, {_count(point.flops)} FLOP -> {point.describe()}")
        if issue_bound(k, point):
            head += (f"; but SM throughput {k.sm_pct:.0f}% exceeds DRAM {k.dram_pct:.0f}%: instruction issue "
                     "limits it (the FLOP count sees only FFMA/FADD/FMUL, not SFU, integer or conversion work)")
    elif k.dram_bytes is not None:
        head += f" | {_bytes(k.dram_bytes)} DRAM"
    return head


def issue_bound(k: KernelMetrics, point: RooflinePoint) -> bool:
    """ncu's SM throughput is the busiest unit while the FLOP roofline calls the kernel memory-bound
    or far from its compute ceiling: math the FLOP counters miss (erff, expf, division, index
    arithmetic) is what limits it. Seen on the H200 capture of elementwise_chain: SM 72%, DRAM 44%."""
    if k.sm_pct is None or k.dram_pct is None:
        return False
    return k.sm_pct > max(k.dram_pct, point.limit_pct) + 10 and k.sm_pct >= 50


def kernel_details(report: ProfileReport, k: KernelMetrics, full: bool = False) -> list[str]:
    """Stall, compiler and advice lines for one launch (indented)."""
    lines = []
    stalls = k.stall_share()[: None if full else 3]
    if stalls:
        lines.append("   stalls (cycles per issued instruction): " + ", ".join(
            f"{r} {v:.1f}" + (f" ({pct:.0f}%)" if pct is not None else "") for r, v, pct in stalls))
    res = resources_text(report.resources.get(k.id))
    if res:
        lines.append(f"   compiler: {res}")
    rules = rules_sorted(k)
    for rule in rules if full else [r for r in rules if r.type != "INF"][:3]:
        lines.append("   advice: " + rule.one_line(1000 if full else 220))
    return lines


def forward_line(report: ProfileReport) -> str | None:
    """The whole forward against the copy ceiling, from the minimum bytes it must move."""
    total = report.kernel_time_ns()
    if not total:
        return None
    n = len(report.kernels) or sum(round(t.get("calls_per_forward", 1)) for t in report.timeline)
    line = f"forward: {n} kernel launch(es), {_us(total)} of device time"
    if report.min_bytes:
        rate = report.min_bytes / (total * 1e-9)
        line += f"; moves at least {_bytes(report.min_bytes)} (inputs+weights+outputs) -> {rate / 1e12:.2f} TB/s"
        if report.limits:
            line += f" = {100 * rate / report.limits.copy_bytes_per_s:.0f}% of measured copy bandwidth"
    return line


def timeline_title(report: ProfileReport) -> str:
    if report.mode == "ncu":
        return "measured without ncu (torch.profiler, L2 flushed, per forward)"
    return "kernel timeline (torch.profiler, per forward; no hardware counters)"


def measured_line(report: ProfileReport) -> str | None:
    """ncu's summed kernel time against the same forward's device time measured without it."""
    if report.mode != "ncu" or not report.timeline or not report.kernels:
        return None
    ncu_ns = sum(k.duration_ns or 0.0 for k in report.kernels)
    measured_ns = 1e3 * sum(t["us_per_forward"] for t in report.timeline)
    if not ncu_ns or not measured_ns:
        return None
    return (f"ncu kernel time {_us(ncu_ns)} vs {_us(measured_ns)} measured without ncu "
            f"({100 * (ncu_ns / measured_ns - 1):+.0f}%)")


def _header(report: ProfileReport) -> list[str]:
    where = report.device_name or "no GPU"
    lines = [f"profile ({report.mode}) of {report.candidate} on {where}"]
    if report.limits:
        lines.append("ceilings: " + report.limits.describe())
    lines += [f"NOTE: {m}" for m in report.messages]
    if report.error:
        lines.append(f"ERROR: {report.error}")
    return lines


def compiler_lines(report: ProfileReport, limit: int | None = None) -> list[str]:
    c = report.compiler
    if c is None:
        return []
    if c.error and not c.kernels:
        return [f"compiler report unavailable: {c.error}"]
    lines = ["compiler (ptxas -v):" if all(k.source == "ptxas" for k in c.kernels) else "compiler:"]
    for r in c.kernels[:limit]:
        lines.append(f"   {short_name(r.display_name)} [{r.arch}]: {resources_text(r)}")
    lines += [f"   note: {n}" for n in c.notes[:3]]
    return lines


def summary_text(report: ProfileReport, full: bool = False, max_chars: int = SUMMARY_CHARS) -> str:
    """The compact text the agent reads; slowest kernels first; within `max_chars`."""
    lines = _header(report)
    if report.error and report.error_log:
        lines.append("log:\n" + report.error_log.strip()[-1200:])
    kernels = sorted(report.kernels, key=lambda k: -(k.duration_ns or 0.0))
    body: list[str] = []
    for k in kernels:
        block = [kernel_line(report, k), *kernel_details(report, k, full)]
        if sum(len(s) + 1 for s in lines + body + block) > max_chars - 900:  # keep room for the tail
            body.append(f"... {len(kernels) - kernels.index(k)} more kernel launch(es) not shown")
            break
        body += block
    for t in report.timeline[:12]:
        body.append(f"{short_name(t['name'])}: {t['us_per_forward']:.1f} us per forward "
                    f"({t['calls_per_forward']:g} call(s), {t['us_per_call']:.1f} us each)")
    if report.timeline:
        body.insert(len(body) - min(len(report.timeline), 12), timeline_title(report) + ":")
    tail = [s for s in [forward_line(report), measured_line(report)] if s] + compiler_lines(report, limit=8)
    text = "\n".join(lines + body + tail)
    return text if len(text) <= max_chars else text[: max_chars - 40] + "\n[... summary truncated]"


def render(report: ProfileReport, console: Any, full: bool = False) -> None:
    """Print the report for people: header, kernel table, per-kernel notes, compiler table."""
    from rich.table import Table
    from rich.text import Text

    for i, line in enumerate(_header(report)):
        style = "bold" if i == 0 else "yellow" if line.startswith("NOTE") else "red" if line.startswith("ERROR") else ""
        console.print(Text(line, style=style))
    if report.error and report.error_log:
        console.print(Text(report.error_log.strip()[-3000:]))
    if report.kernels:
        table = Table(title="kernels (one forward, ncu)", title_justify="left")
        for col in ("#", "kernel", "time", "SM %", "DRAM %", "occ. ach/theo", "regs", "smem/blk", "grid x block",
                    "DRAM bytes", "FP32 FLOP", "bound", "% limit"):
            table.add_column(col, justify="left" if col in ("kernel", "bound", "grid x block") else "right",
                             no_wrap=col in ("kernel", "grid x block"))
        for k in report.kernels:
            p = report.roofline.get(k.id)
            launch = f"{_dims(k.grid, k.grid_blocks)} x {_dims(k.block, k.block_threads)}"
            table.add_row(str(k.id), short_name(k.name, 40), _us(k.duration_ns), _num(k.sm_pct), _num(k.dram_pct),
                          f"{_num(k.achieved_occupancy_pct)}/{_num(k.theoretical_occupancy_pct)}", _num(k.registers),
                          _bytes(k.smem_per_block), launch,
                          _bytes(k.dram_bytes), _count(k.fp32_flops), p.bound if p else "-",
                          f"{p.limit_pct:.0f}%" if p else "-")
        console.print(table)
        for k in report.kernels:
            details = kernel_details(report, k, full)
            if details:
                console.print(Text(f"#{k.id} {short_name(k.name)}", style="bold"))
                for line in details:
                    console.print(Text(line))
    if report.timeline:
        table = Table(title=timeline_title(report), title_justify="left")
        for col in ("kernel", "us / forward", "calls", "us / call"):
            table.add_column(col, justify="left" if col == "kernel" else "right")
        for t in report.timeline:
            table.add_row(short_name(t["name"], 80), f"{t['us_per_forward']:.1f}", f"{t['calls_per_forward']:g}",
                          f"{t['us_per_call']:.1f}")
        console.print(table)
    for line in (forward_line(report), measured_line(report)):
        if line:
            console.print(Text(line))
    c = report.compiler
    if c and c.kernels:
        table = Table(title=f"compiler resources ({c.kernels[0].source}{', cached' if c.cached else ''})",
                      title_justify="left")
        for col in ("kernel", "arch", "regs", "smem", "stack", "spill st/ld", "cmem[0]"):
            table.add_column(col, justify="left" if col == "kernel" else "right")
        for r in c.kernels:
            spill = (f"{r.spill_store_bytes}/{r.spill_load_bytes}" if r.source == "ptxas"
                     else f"local {_num(r.local_bytes)}")
            table.add_row(short_name(r.display_name, 70), r.arch, _num(r.registers), _bytes(r.smem_bytes),
                          _bytes(r.stack_frame_bytes), Text(spill, style="red" if r.spills else ""),
                          _bytes(r.cmem0_bytes))
        console.print(table)
        for n in c.notes:
            console.print(Text(f"note: {n}", style="yellow"))
    elif c:
        console.print(Text(f"compiler report unavailable: {c.error}", style="yellow"))
    for n in report.notes:
        console.print(Text(f"note: {n}", style="dim"))
    took = ", ".join(f"{k} {v:.1f} s" for k, v in report.seconds.items())
    console.print(Text(f"time: {took}", style="dim"))
