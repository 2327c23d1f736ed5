"""Parse Nsight Compute CSV exports into one record per profiled kernel launch.

Two pages of `ncu --import REP --csv` are understood, alone or together:

- raw (`--page raw`): a header row of metric names after the fixed columns ("ID", "Process
  ID", ..., "Kernel Name", ..., "Block Size", "Grid Size", "Device", "CC"), then a row of
  units (empty under the fixed columns), then one row per kernel launch;
- details (`--page details`): one row per (launch, section, metric) with "Section Name",
  "Metric Name", "Metric Unit", "Metric Value", and, in ncu 2023.2+, rule rows whose metric
  fields are empty and whose "Rule Name", "Rule Type", "Rule Description", "Estimated
  Speedup Type", "Estimated Speedup" hold the profiler's advice.

Rows of both pages share the "ID" column, which joins them. Values are converted to base
units (ns, bytes) whatever `--print-units` was used; thousands separators are dropped. A
value ncu could not collect ("n/a", NaN) is recorded as unusable rather than guessed.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field
from typing import Any

FIXED_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time", "Context",
                 "Stream", "Block Size", "Grid Size", "Device", "CC")

# Our field -> raw metric names (newest first) and the details page's display names.
RAW_NAMES: dict[str, tuple[str, ...]] = {
    "duration_ns": ("gpu__time_duration.sum",),
    "sm_pct": ("sm__throughput.avg.pct_of_peak_sustained_elapsed",),
    "memory_pct": ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",),
    "dram_pct": ("dram__throughput.avg.pct_of_peak_sustained_elapsed",
                 "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
    "l1_pct": ("l1tex__throughput.avg.pct_of_peak_sustained_active",),
    "l2_pct": ("lts__throughput.avg.pct_of_peak_sustained_elapsed",),
    "achieved_occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active",),
    "theoretical_occupancy_pct": ("sm__maximum_warps_per_active_cycle_pct",),
    "registers": ("launch__registers_per_thread",),
    "smem_static": ("launch__shared_mem_per_block_static",),
    "smem_dynamic": ("launch__shared_mem_per_block_dynamic",),
    "block_threads": ("launch__block_size",),
    "grid_blocks": ("launch__grid_size",),
    "waves_per_sm": ("launch__waves_per_multiprocessor",),
    "dram_read_bytes": ("dram__bytes_read.sum",),
    "dram_write_bytes": ("dram__bytes_write.sum",),
    "ffma": ("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",),
    "fadd": ("smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",),
    "fmul": ("smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",),
    "warp_cycles_per_issue": ("smsp__average_warp_latency_per_inst_issued.ratio",
                              "smsp__average_warps_latency_per_inst_issued.ratio"),
}
DETAILS_NAMES: dict[str, tuple[str, ...]] = {
    "duration_ns": ("Duration",),
    "sm_pct": ("Compute (SM) Throughput",),
    "memory_pct": ("Memory Throughput",),
    "dram_pct": ("DRAM Throughput",),
    "l1_pct": ("L1/TEX Cache Throughput",),
    "l2_pct": ("L2 Cache Throughput",),
    "achieved_occupancy_pct": ("Achieved Occupancy",),
    "theoretical_occupancy_pct": ("Theoretical Occupancy",),
    "registers": ("Registers Per Thread",),
    "smem_static": ("Static Shared Memory Per Block",),
    "smem_dynamic": ("Dynamic Shared Memory Per Block",),
    "block_threads": ("Block Size",),
    "grid_blocks": ("Grid Size",),
    "waves_per_sm": ("Waves Per SM",),
    "warp_cycles_per_issue": ("Warp Cycles Per Issued Instruction",),
}
# Without these a launch's numbers cannot be trusted at all.
ESSENTIAL = ("duration_ns",)
# Stall breakdown (WarpStateStats): cycles each issued instruction spent in each state.
_STALL = re.compile(r"^smsp__(?:average_warps_issue_stalled|average_warp_latency_issue_stalled|"
                    r"pcsamp_warps_issue_stalled)_(?P<reason>[a-z_]+?)(?:_per_issue_active\.ratio|\.ratio|\.sum)?$")
_NOT_STALLS = {"selected", "not_selected_per_warp_active"}  # "selected" is the issuing state itself

_TIME = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}
_SI = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "k": 1e3}
_UNUSABLE = {"n/a", "na", "nan", "-nan", "inf", "-inf", "(!) n/a", ""}


class NcuParseError(ValueError):
    """The text is not an ncu CSV export (no header row with "ID" and "Kernel Name")."""


@dataclass
class Rule:
    """One piece of ncu advice (a rule result): OPT/WRN/INF/ERR plus its text."""

    name: str
    type: str
    section: str
    description: str
    speedup_type: str = ""
    speedup_pct: float | None = None

    def one_line(self, limit: int = 220) -> str:
        """The advice as one line: type, rule, estimated speed-up, trimmed description."""
        text = re.sub(r"\s+", " ", self.description).strip()
        text = re.sub(r"\s*See the .*?(?:for more details|description).*?\.", "", text)  # doc pointers
        if len(text) > limit:
            text = text[: limit - 3].rstrip() + "..."
        gain = f" (est. speed-up {self.speedup_type} {self.speedup_pct:.0f}%)" if self.speedup_pct else ""
        return f"{self.type} {self.name}{gain}: {text}"


@dataclass
class KernelMetrics:
    """What ncu measured for one kernel launch. Times in ns, sizes in bytes, percentages 0-100;
    None where ncu did not report the metric (or reported n/a / NaN: see `unusable`)."""

    id: int
    name: str
    mangled: str | None = None
    block: str = ""
    grid: str = ""
    duration_ns: float | None = None
    sm_pct: float | None = None
    memory_pct: float | None = None
    dram_pct: float | None = None
    l1_pct: float | None = None
    l2_pct: float | None = None
    achieved_occupancy_pct: float | None = None
    theoretical_occupancy_pct: float | None = None
    registers: float | None = None
    smem_static: float | None = None
    smem_dynamic: float | None = None
    block_threads: float | None = None
    grid_blocks: float | None = None
    waves_per_sm: float | None = None
    dram_read_bytes: float | None = None
    dram_write_bytes: float | None = None
    ffma: float | None = None
    fadd: float | None = None
    fmul: float | None = None
    warp_cycles_per_issue: float | None = None
    stalls: list[tuple[str, float]] = field(default_factory=list)  # (reason, cycles/issue), largest first
    rules: list[Rule] = field(default_factory=list)
    unusable: list[str] = field(default_factory=list)  # fields ncu reported as n/a or NaN
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def dram_bytes(self) -> float | None:
        if self.dram_read_bytes is None and self.dram_write_bytes is None:
            return None
        return (self.dram_read_bytes or 0.0) + (self.dram_write_bytes or 0.0)

    @property
    def fp32_flops(self) -> float | None:
        """FP32 operations: an FMA counts as two, add and multiply as one (thread-level)."""
        if self.ffma is None and self.fadd is None and self.fmul is None:
            return None
        return 2 * (self.ffma or 0.0) + (self.fadd or 0.0) + (self.fmul or 0.0)

    @property
    def smem_per_block(self) -> float | None:
        if self.smem_static is None and self.smem_dynamic is None:
            return None
        return (self.smem_static or 0.0) + (self.smem_dynamic or 0.0)

    def usable(self) -> bool:
        """Whether the essential counters are present and finite."""
        return all(getattr(self, f) is not None for f in ESSENTIAL)

    def stall_share(self) -> list[tuple[str, float, float | None]]:
        """(reason, cycles per issued instruction, % of all cycles between issues)."""
        total = self.warp_cycles_per_issue or sum(v for _, v in self.stalls) or None
        return [(r, v, (100.0 * v / total) if total else None) for r, v in self.stalls]


# --- values ------------------------------------------------------------------------------------
def parse_number(text: str | None) -> float | None:
    """'1,234.5' -> 1234.5; n/a, NaN, Inf, empty and non-numbers -> None."""
    if text is None:
        return None
    s = text.strip().replace(",", "").replace("\u202f", "").replace(" ", "")
    if s.lower() in _UNUSABLE:
        return None
    try:
        value = float(s)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def to_base_units(value: float, unit: str) -> float:
    """Scale a value printed in `unit` to ncu's base unit (ns for time, bytes, cycles, ...)."""
    u = (unit or "").strip()
    if u in _TIME:
        return value * _TIME[u]
    for base in ("byte", "cycle", "inst", "hz", "warp", "sector", "request", "thread", "block"):
        if u.endswith(base) or f"{base}/" in u:
            prefix = u.split(base, 1)[0]
            if prefix in _SI:
                return value * _SI[prefix]
    m = re.fullmatch(r"([KMGT]?)(?:B|byte)/s(?:econd)?", u)  # throughput like Gbyte/second
    if m:
        return value * _SI[m.group(1)]
    return value


def _is_unusable(text: str | None) -> bool:
    return text is not None and text.strip().lower() in _UNUSABLE - {""}


# --- CSV plumbing ------------------------------------------------------------------------------
def extract_csv(text: str) -> str:
    """Drop what precedes ncu's header row: ==PROF== lines and the application's own output."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith('"ID",') or line.startswith("ID,"):
            return "\n".join(ln for ln in lines[i:] if not ln.startswith(("==PROF==", "==WARNING==")))
    raise NcuParseError("no ncu CSV header (a row starting with \"ID\") in the output")


def _rows(text: str) -> tuple[list[str], list[list[str]]]:
    reader = csv.reader(io.StringIO(extract_csv(text)))
    header = next(reader)
    if "Kernel Name" not in header:
        raise NcuParseError("the ncu CSV header has no 'Kernel Name' column")
    return header, [row for row in reader if row and any(cell.strip() for cell in row)]


def _int(text: str) -> int:
    value = parse_number(text)
    return int(value) if value is not None else -1


def _looks_mangled(name: str) -> bool:
    return name.startswith("_Z")


# --- raw page ----------------------------------------------------------------------------------
def parse_raw(text: str) -> list[KernelMetrics]:
    """One KernelMetrics per row of a `--page raw` CSV export."""
    header, rows = _rows(text)
    col = {name: i for i, name in enumerate(header)}
    units: list[str] = [""] * len(header)
    if rows and not rows[0][col["ID"]].strip():  # the units row: empty under the fixed columns
        units = rows[0] + [""] * (len(header) - len(rows[0]))
        rows = rows[1:]
    kernels = []
    for row in rows:
        row = row + [""] * (len(header) - len(row))
        name = row[col["Kernel Name"]]
        k = KernelMetrics(id=_int(row[col["ID"]]), name=name, mangled=name if _looks_mangled(name) else None,
                          block=row[col["Block Size"]] if "Block Size" in col else "",
                          grid=row[col["Grid Size"]] if "Grid Size" in col else "")
        values: dict[str, tuple[str, str]] = {}
        for i, metric in enumerate(header):
            if metric not in FIXED_COLUMNS:
                values[metric] = (row[i], units[i])
        _fill_from_raw(k, values)
        kernels.append(k)
    return kernels


def _fill_from_raw(k: KernelMetrics, values: dict[str, tuple[str, str]]) -> None:
    for metric, (text, unit) in values.items():
        number = parse_number(text)
        k.raw[metric] = to_base_units(number, unit) if number is not None else text
    for attr, names in RAW_NAMES.items():
        for metric in names:
            if metric not in values:
                continue
            text, unit = values[metric]
            number = parse_number(text)
            if number is None:
                if _is_unusable(text) and attr not in k.unusable:
                    k.unusable.append(attr)
                continue
            setattr(k, attr, to_base_units(number, unit))
            break
    stalls: dict[str, float] = {}
    for metric, (text, _unit) in values.items():
        m = _STALL.match(metric)
        number = parse_number(text)
        if m and number is not None and "not_issued" not in metric:
            reason = m.group("reason")
            # prefer the per-issue ratio family; pc-sampling counts only fill gaps
            if reason not in _NOT_STALLS and (reason not in stalls or "per_issue_active" in metric):
                stalls[reason] = number
    k.stalls = sorted(((r, v) for r, v in stalls.items() if v > 0), key=lambda rv: -rv[1])


# --- details page ------------------------------------------------------------------------------
def parse_details(text: str) -> list[KernelMetrics]:
    """One KernelMetrics per launch ID of a `--page details` CSV export, rules included."""
    header, rows = _rows(text)
    col = {name: i for i, name in enumerate(header)}

    def cell(row: list[str], name: str) -> str:
        i = col.get(name)
        return row[i] if i is not None and i < len(row) else ""

    kernels: dict[int, KernelMetrics] = {}
    values: dict[int, dict[str, tuple[str, str]]] = {}
    raw_values: dict[int, dict[str, tuple[str, str]]] = {}
    for row in rows:
        kid = _int(cell(row, "ID"))
        name = cell(row, "Kernel Name")
        k = kernels.get(kid)
        if k is None:
            k = kernels[kid] = KernelMetrics(id=kid, name=name, mangled=name if _looks_mangled(name) else None,
                                             block=cell(row, "Block Size"), grid=cell(row, "Grid Size"))
        metric, value, unit = cell(row, "Metric Name"), cell(row, "Metric Value"), cell(row, "Metric Unit")
        if metric:
            if "__" in metric:  # "Command line profiler metrics": raw names requested with --metrics
                raw_values.setdefault(kid, {})[metric] = (value, unit)
            else:
                values.setdefault(kid, {}).setdefault(metric, (value, unit))
        rule = cell(row, "Rule Name")
        if rule and cell(row, "Rule Description").strip():
            k.rules.append(Rule(name=rule, type=cell(row, "Rule Type") or "INF", section=cell(row, "Section Name"),
                                description=cell(row, "Rule Description"),
                                speedup_type=cell(row, "Estimated Speedup Type"),
                                speedup_pct=parse_number(cell(row, "Estimated Speedup"))))
    for kid, k in kernels.items():
        _fill_from_raw(k, raw_values.get(kid, {}))
        for attr, names in DETAILS_NAMES.items():
            for display in names:
                if display not in values.get(kid, {}):
                    continue
                text, unit = values[kid][display]
                number = parse_number(text)
                if number is None:
                    if _is_unusable(text) and attr not in k.unusable:
                        k.unusable.append(attr)
                    continue
                if getattr(k, attr) is None:
                    setattr(k, attr, to_base_units(number, unit))
                break
        for display, (text, unit) in values.get(kid, {}).items():
            number = parse_number(text)
            k.raw.setdefault(display, to_base_units(number, unit) if number is not None else text)
    return [kernels[i] for i in sorted(kernels)]


# --- both --------------------------------------------------------------------------------------
def merge(raw: list[KernelMetrics], details: list[KernelMetrics]) -> list[KernelMetrics]:
    """Join the pages by launch ID: raw numbers win, details add rules, demangled names and gaps."""
    if not raw:
        return details
    by_id = {k.id: k for k in details}
    for k in raw:
        d = by_id.get(k.id)
        if d is None:
            continue
        k.rules = d.rules
        if d.name and not _looks_mangled(d.name):
            k.mangled = k.mangled or (k.name if _looks_mangled(k.name) else None)
            k.name = d.name
        for attr in RAW_NAMES:
            if getattr(k, attr) is None and getattr(d, attr) is not None:
                setattr(k, attr, getattr(d, attr))
        k.unusable = [u for u in dict.fromkeys(k.unusable + d.unusable) if getattr(k, u) is None]
        for key, value in d.raw.items():
            k.raw.setdefault(key, value)
    return raw


def parse_ncu(raw_text: str | None = None, details_text: str | None = None) -> list[KernelMetrics]:
    """Kernels from a raw page, a details page, or both (joined by launch ID)."""
    raw = parse_raw(raw_text) if raw_text else []
    details = parse_details(details_text) if details_text else []
    return merge(raw, details)
