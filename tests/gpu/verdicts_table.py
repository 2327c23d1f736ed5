"""Print a short table of kcoder verdict JSON files (kcoder eval --json): the judge's figures,
the profiler's kernel time and where the verdict's seconds went. Used by device_session.sh."""
import json
import re
import sys


def row(path: str) -> str:
    try:
        v = json.load(open(path))
    except Exception as exc:  # a run cut short: say so, keep going
        return f"{path}: unreadable ({exc})"
    found = (re.search(r"kernels? ([\d.]+) us/call|kernel time per call ([\d.]+)", n) for n in v.get("notes", []))
    kernel = next((m.group(1) or m.group(2) for m in found if m), "-")
    s = v.get("seconds", {})
    fig = lambda k: "-" if v.get(k) is None else f"{v[k]:.1f}"  # noqa: E731
    ratio = lambda k: "-" if v.get(k) is None else f"{v[k]:.3f}"  # noqa: E731
    name = v.get("problem", path).split("/")[-1][:34]
    return (f"{v.get('device_name', '?')[:20]} {name:34} {v.get('status', '?'):9} reward {v.get('reward')} "
            f"cand {fig('candidate_us'):>9} "
            f"eager {fig('eager_us'):>9} compile {fig('compile_us'):>9} kern {kernel:>9} "
            f"x_eager {ratio('speedup_vs_eager'):>6} x_comp {ratio('speedup_vs_compile'):>6} "
            f"sol {ratio('candidate_sol_fraction'):>5} peakMB {v.get('peak_memory_mb')} fpMB {v.get('footprint_mb')} "
            f"total {s.get('total', '-')}s (verify {s.get('verify', '-')}, timing {s.get('timing', '-')}, "
            f"audits {s.get('audits', '-')}) {v.get('reason', '')[:160]}")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(row(p))
