"""Arena batches (issue 45): the reference process's arena, an implementation's mapping of it, the
freeze around reading it, the judge's draw of weights, and a figure too fast to measure."""

import os
import subprocess
import sys
import time

import pytest
import torch

from kcoder.evaluate.freeze import freeze, thaw
from kcoder.evaluate.harness.arena import MappedArena, OutputMismatch, call_inputs, store
from kcoder.evaluate.harness.batchrun import Factors, cpu_key, perturbed
from kcoder.evaluate.reference.arenaprep import Arena, output_tree
from kcoder.evaluate.reference.drawweights import draw_state


class Pair(torch.nn.Module):
    def forward(self, x, idx, k):
        return (x * 2 + idx.sum() + k, [x[:, :1].exp()])


def _base():
    torch.manual_seed(0)
    return [torch.randn(5, 7), torch.arange(3), 4]


def _arena(n=3, key=1234):
    base = _base()
    tree = output_tree(torch, Pair()(*base), [0])
    arena = Arena(torch, base, n, tree)
    layout = arena.load(Factors(torch, cpu_key(torch, key), n, base, "cpu"), base, n)
    return arena, layout, base


def test_every_call_reads_its_own_inputs_and_fills_its_slot():
    arena, layout, base = _arena()
    mapped = MappedArena(torch, layout, os.dup(arena.fds[0]), os.dup(arena.fds[1]))
    try:
        assert arena.unwritten() == [0, 1, 2]  # poisoned until the calls run
        mapped.run(Pair(), lambda fn: fn(), layout)
        assert arena.unwritten() == []
        for i in range(3):
            seen = call_inputs(torch, mapped.maps[0], layout, i)
            replay = perturbed(torch, base, 1234, 3, i, "cpu")  # what the reference checks against
            assert torch.equal(seen[0], replay[0]) and not torch.equal(seen[0], base[0])
            assert torch.equal(seen[1], base[1]) and seen[2] == 4
            out, expected = arena.output(i), Pair()(*replay)
            assert torch.equal(out[0], expected[0]) and torch.equal(out[1][0], expected[1][0])
    finally:
        mapped.close()
        arena.close()


def test_a_partly_written_slot_is_unwritten():
    arena, layout, _ = _arena()
    mapped = MappedArena(torch, layout, os.dup(arena.fds[0]), os.dup(arena.fds[1]))
    try:
        mapped.run(Pair(), lambda fn: fn(), layout)
        slot = mapped.outputs[layout["slot"]:2 * layout["slot"]]
        slot[:4].copy_(torch.tensor([0xA5, 0xA5, 0xA5, 0x7F], dtype=torch.uint8))  # one float poisoned again
        assert arena.unwritten() == [1]
    finally:
        mapped.close()
        arena.close()


def test_an_output_of_another_shape_is_the_implementations_failure():
    arena, layout, _ = _arena(n=1)
    mapped = MappedArena(torch, layout, os.dup(arena.fds[0]), os.dup(arena.fds[1]))
    try:
        with pytest.raises(OutputMismatch, match=r"output\[0\] has shape \[5, 6\]"):
            store(torch, (torch.zeros(5, 6), [torch.zeros(5, 1)]), layout["outputs"], mapped.outputs, 0)
    finally:
        mapped.close()
        arena.close()


def test_the_arena_cannot_shrink_under_a_reader():
    arena, _, _ = _arena(n=1)
    try:
        with pytest.raises(PermissionError):
            os.ftruncate(arena.fds[1], 0)
    finally:
        arena.close()


def test_a_frozen_process_writes_nothing_until_thawed(tmp_path):
    counter = tmp_path / "counter"
    code = ("import sys, time\nn = 0\nwhile True:\n    n += 1\n"
            "    open(sys.argv[1], 'w').write(str(n))\n    time.sleep(0.002)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(counter)])
    try:
        while not counter.exists() or not counter.read_text():
            time.sleep(0.01)
        stopped = freeze(proc.pid)
        assert proc.pid in stopped
        before = counter.read_text()
        time.sleep(0.2)
        assert counter.read_text() == before
        thaw(stopped)
        time.sleep(0.2)
        assert counter.read_text() != before
    finally:
        proc.kill()
        proc.wait()


def test_the_judges_draw_changes_every_floating_tensor_and_keeps_their_kind():
    norm = torch.nn.GroupNorm(2, 4)
    batch = torch.nn.BatchNorm1d(4)
    state = {**{f"norm.{k}": v for k, v in norm.state_dict().items()},
             **{f"bn.{k}": v for k, v in batch.state_dict().items()}}
    drawn = draw_state(torch, state, seed=7)
    assert drawn.keys() == state.keys()
    for name, value in state.items():
        assert drawn[name].shape == value.shape and drawn[name].dtype == value.dtype, name
    assert drawn["norm.weight"].std() > 0.05 and drawn["norm.bias"].abs().max() > 0  # no longer uniform
    assert (drawn["bn.running_var"] >= 0).all() and (drawn["norm.weight"] >= 0).all()
    assert torch.equal(drawn["bn.num_batches_tracked"], state["bn.num_batches_tracked"])
    assert torch.equal(draw_state(torch, state, seed=7)["norm.weight"], drawn["norm.weight"])


def test_a_figure_at_the_clocks_resolution_claims_no_speedup():
    from kcoder.evaluate.summary import record_timings
    from kcoder.evaluate.timings import Timings
    from kcoder.verdict import Verdict

    v = Verdict(problem="p", candidate="c", device="cpu")
    v.correct = True
    samples = {"eager": [100.0] * 5, "compile": [80.0] * 5, "candidate": [1.0] * 5}
    record_timings(v, Timings(samples), too_fast=True)
    assert v.reward == 1 and v.speedup_vs_compile is None and v.speedup_vs_eager is None
    assert "too fast for the judge's clock" in v.reason
    record_timings(v, Timings(samples))
    assert v.reward == 3 and v.speedup_vs_compile == pytest.approx(80.0)


def test_the_candidates_calibration_is_timed_in_the_reference_process_while_it_is_frozen():
    """What is taken off a candidate's batch: a batch of the reference process's, every process of
    the candidate's stopped before it starts and continued after it ends; nothing asked of the
    candidate's process (a thread of its own that slows its calibration finds nothing to slow)."""
    from types import SimpleNamespace

    from kcoder.evaluate.arenaclock import ArenaClock, CandidateSide
    from kcoder.evaluate.judgeclock import Endpoint

    events = []

    class Reference:
        def request(self, limit_s, **message):
            events.append(("reference", message["op"], message["impl"], message["calibration"]))
            return {"arena": {"n": message["n"]}}

        def send(self, **message):
            events.append(("reference", message["op"]))

        def receive(self, limit_s, watch=True):
            events.append(("reference", "done"))
            return {"done": True}

    class Candidate:
        proc = SimpleNamespace(pid=4242)

        def send(self, **message):
            events.append(("candidate", message))

        def receive(self, limit_s, watch=True):
            events.append(("candidate", "reply"))
            return {"done": True}

    def fail(exc):
        raise AssertionError(exc)

    def expect(reply, key):
        assert key in reply, (reply, key)
        return reply

    side = CandidateSide(Endpoint(Candidate(), fail, expect), None, lambda: events.append(("freeze",)) or {4242},
                         lambda pids: events.append(("thaw", sorted(pids))), lambda result, label: None)
    clock = ArenaClock(Endpoint(Reference(), fail, expect), None, time.monotonic() + 10, candidate=side)
    batch = clock.batch(6, calibration=True)
    assert batch.n == 6 and batch.seconds > 0
    assert events == [("freeze",), ("reference", "arena", "eager", True), ("reference", "go"),
                      ("reference", "done"), ("thaw", [4242])]


def test_the_reference_process_is_stopped_while_the_candidates_batch_runs():
    """Its idle OpenMP threads spin after it writes the inputs; on a 2-core host they took the
    candidate's cores (a 1-row softmax read 150-200 us a call by the judge's clock, 17-31 us with
    the reference stopped). Stopped from before the clock until the candidate's "done"."""
    import subprocess
    import sys
    from types import SimpleNamespace

    from kcoder.evaluate.arenaclock import ArenaClock, CandidateSide
    from kcoder.evaluate.freeze import _state
    from kcoder.evaluate.judgeclock import Endpoint

    ref_proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    seen = {}
    try:
        class Reference:
            proc = ref_proc

            def request(self, limit_s, **message):
                seen.setdefault(message["op"], _state(ref_proc.pid))
                return {"arena": {"n": message["n"]}} if message["op"] == "arena" else {"ok": True}

        class Candidate:
            proc = SimpleNamespace(pid=4242)

            def send(self, **message):
                seen["candidate's go"] = _state(ref_proc.pid)

            def receive(self, limit_s, watch=True):
                seen["candidate's done"] = _state(ref_proc.pid)
                return {"done": True}

        def expect(reply, key):
            assert key in reply, (reply, key)
            return reply

        side = CandidateSide(Endpoint(Candidate(), AssertionError, expect), None, lambda: set(), lambda pids: None,
                             lambda result, label: None)
        clock = ArenaClock(Endpoint(Reference(), AssertionError, expect), None, time.monotonic() + 10, candidate=side)
        clock.batch(3, calibration=False)
        assert seen["arena"] != "T" and seen["arena_check"] != "T"  # it writes the inputs and checks awake
        assert seen["candidate's go"] == "T" and seen["candidate's done"] == "T"
        assert _state(ref_proc.pid) != "T"
    finally:
        ref_proc.kill()
        ref_proc.wait()
