"""One verdict's lines for a device_session stage: status, reward and reason, then the judge's
clock note. `python3 tests/gpu/verdict_row.py LABEL VERDICT.json NAME`."""

import json
import sys

label, path, name = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    v = json.load(open(path))
except (OSError, ValueError):
    print(f"{label} {name:20} no verdict (see {path.removesuffix('.json')}.err)")
    sys.exit(0)
clock = next((n for n in v["notes"] if n.startswith("judge's clock:")), "")
print(f"{label} {name:20} {v['status']:9} reward {v['reward']:2} {v['reason'][:150]}")
print(f"      {clock[:230]}")
