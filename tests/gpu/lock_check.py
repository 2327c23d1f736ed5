"""Issue 27 items 2-3 on the GPU: read a $KCODER_DEVICE_TRACE file (devicelock.py) and a
profile's JSON, and print whether one GPU had one timer and ncu ran inside the sandbox.

    python tests/gpu/lock_check.py TRACE.jsonl PROFILE.json

Exit 1 when two timings (or two lock holders) overlapped, a build-ahead started a reference
process, or a timing ran without the lock.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def overlaps(items: list[dict]) -> int:
    return sum(1 for i, a in enumerate(items) for b in items[i + 1:]
               if a["start"] < b["end"] and b["start"] < a["end"])


def main() -> int:
    events = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines()]
    timing = [e for e in events if e["kind"] == "timing"]
    held = [e for e in events if e["kind"] == "held"]
    starts = [e for e in events if e["kind"] == "start"]
    ahead = [e for e in starts if e["what"] == "evaluate compile"]
    rows = [("timed stages", len(timing)), ("timed stages overlapping", overlaps(timing)),
            ("timed stages without the lock", sum(not e["held"] for e in timing)),
            ("lock holders", len(held)), ("lock holders overlapping", overlaps(held)),
            ("build-ahead processes", len(ahead)),
            ("build-ahead reference processes", sum(e["process"] == "reference" for e in ahead)),
            ("build-ahead processes holding the lock", sum(e["held"] for e in ahead))]
    bad = rows[1][1] or rows[2][1] or rows[4][1] or rows[6][1] or not timing
    if len(sys.argv) > 2 and Path(sys.argv[2]).is_file():
        profile = json.loads(Path(sys.argv[2]).read_text())
        rows.append(("profile mode (ncu inside the sandbox)", profile.get("mode")))
        rows += [("profile message", m[:100]) for m in profile.get("messages", [])]
    width = max(len(name) for name, _ in rows)
    print("\n".join(f"{name:<{width}}  {value}" for name, value in rows))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
