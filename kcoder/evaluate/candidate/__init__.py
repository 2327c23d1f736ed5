"""What runs in the candidate's process, and only there: its worker (build, load, serve the
judge's requests), the guard of its audit calls, the check of its harness code, the outbox that
hands its outputs over, and the diagnostic timing of its own calls.

Nothing here is trusted once the candidate's code has loaded: compiled code can rewrite any of
it. So nothing outside this package imports it (tests/unit/test_layout.py), and the judge reads
from this process only what it checks itself: outputs against the reference's and against the
commitments made under its own clock (judgeclock.py).
"""
