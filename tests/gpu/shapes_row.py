"""One line of the shapes stage's table: `python3 tests/gpu/shapes_row.py VERDICT.json NAME`."""

import json
import sys

path, name = sys.argv[1], sys.argv[2]
try:
    v = json.load(open(path))
except (OSError, ValueError) as exc:
    print(f"SHAPES {name:40s} unreadable ({exc})")
    sys.exit(0)
print(f"SHAPES {name:40s} {v.get('status', '?'):9s} {(v.get('shapes') or v.get('reason', ''))[:150]}")
