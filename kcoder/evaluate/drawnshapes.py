"""Input sets at batch sizes the judge draws (issue 48; EvalOptions.shapes).

After the input sets at the problem's own shapes, one input set at each of a few other batch
sizes: 1, a prime, half and double the problem's batch (double only within memory). The inputs
that carry the batch (harness/verify.batch_positions) get that many rows, drawn as the problem
draws them; the parameters stay. The verdict says "right at N of M batch sizes". A wrong answer
there is a refusal under "strict" (`kcoder optimize`) and a note under "auto" (a KernelBench
solution may specialise by design); an exception the candidate raises there (a kernel made for
its shapes, saying so) is a note in both.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

MAX_DOUBLE_MB = 4096  # the double batch only while a call's footprint stays under this


def drawn_batch_sizes(batch: int, footprint_mb: float) -> list[int]:
    """1, a prime near a third of the batch, half, and double (within MAX_DOUBLE_MB); never the
    problem's own batch size."""
    prime = next(p for p in range(max(2, batch // 3), 4 * batch + 3) if _is_prime(p))
    sizes = [1, prime, batch // 2] + ([2 * batch] if 2 * footprint_mb <= MAX_DOUBLE_MB else [])
    return sorted({s for s in sizes if 0 < s != batch})


def _is_prime(n: int) -> bool:
    return n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))


def output_factor(options: Any, batch: int, footprint_mb: float) -> float:
    """How much larger than the problem's own an output may be at the drawn sizes."""
    if options.shapes == "off" or batch <= 0:
        return 1.0
    return max([1.0] + [s / batch for s in drawn_batch_sizes(batch, footprint_mb)])


def verify_at_drawn_shapes(judge: Any, batch: int, footprint_mb: float, deadline: float) -> None:
    """Fails the verdict (judge.fail) on a wrong answer under "strict"; notes otherwise."""
    v = judge.verdict
    if judge.options.shapes == "off":
        return
    if batch <= 0:
        v.notes.append("no input carries a batch dim to scale: checked at the problem's own shapes only")
        return
    sizes = drawn_batch_sizes(batch, footprint_mb)
    right, other = [], []
    for rows in sizes:
        why = _one(judge, rows, deadline)
        (other if why else right).append((rows, why))
    v.shapes = f"right at {len(right)} of {len(sizes)} batch sizes the judge drew " \
               f"({', '.join(str(r) for r, _ in right) or 'none'}; the problem's own is {batch})"
    v.notes.append(v.shapes)
    for rows, why in other:
        v.notes.append(f"at batch size {rows}: {why}")


def _one(judge: Any, rows: int, deadline: float) -> str | None:
    """None when the candidate is right at batch size `rows`, else what happened."""
    left = lambda: max(0.0, deadline - time.monotonic())  # noqa: E731
    label = f"input set at batch size {rows}"
    seed = judge.seed()
    path = str(judge.children.box.outputs / f"out-{secrets.token_hex(8)}.pt")
    reply = judge.ask_candidate(left(), "verify", "answered", op="verify", seed=seed, path=path, label=label, rows=rows)
    if "raised" in reply:
        return f"raised: {str(reply['raised'])[:200]}"
    result = judge.ask_reference(left(), "verify", op="check", seed=seed, path=path, label=label, rows=rows,
                                 **judge.pass_output(reply))
    if result.get("ok"):
        return None
    if "mismatch" not in result:  # the output could not be read back: the same failure as anywhere
        judge.fail("verify", str(result.get("reason", f"{label}: wrong answer")))
    if judge.options.shapes == "strict":
        judge.fail("verify", f"wrong answer at batch size {rows} (the problem's own shapes were right): "
                             f"{result['mismatch']}")
    return f"wrong answer: {str(result['mismatch'])[:200]}"
