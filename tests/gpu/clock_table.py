"""Print, per verdict JSON, the figures the trust design compares: the candidate's reported
time, the judge's own clock, the profiler's kernel time, and the baselines (issue 40)."""

import json
import re
import sys

for path in sys.argv[1:]:
    try:
        v = json.load(open(path))
    except (OSError, ValueError) as exc:
        print(f"{path}: unreadable ({exc})")
        continue
    notes = v.get("notes", [])
    judge = next((n for n in notes if n.startswith("judge's clock")), "")
    kernel = next((n for n in notes if "kernel time" in n or "could not place" in n), "")
    m = re.search(r"judge's clock: ([\d.]+)", judge)
    print(f"{path.split('/')[-1]:40s} {v.get('status'):9s} cand {v.get('candidate_us')} eager {v.get('eager_us')} "
          f"compile {v.get('compile_us')} judge {m.group(1) if m else '-'} | {v.get('reason', '')[:80]}")
    print(f"    {judge[:260]}\n    {kernel[:200]}\n    seconds {v.get('seconds')}")
