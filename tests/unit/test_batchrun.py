"""The batch every implementation is timed in by the judge's clock (batchrun.py, judgeclock.py;
issue 40): inputs that depend on the key, replayed exactly by the reference; commitments that
bind every byte of every output; the judge's reading of its clock against a reported figure."""

import struct

import pytest

torch = pytest.importorskip("torch")

from kcoder.evaluate.candidate.harnesscheck import harness_fingerprint  # noqa: E402
from kcoder.evaluate.harness.batchrun import (  # noqa: E402
    BatchRun,
    calibration_module,
    calibration_template,
    checksum,
    commitments,
    cpu_key,
    perturbed,
)
from kcoder.evaluate.judgeclock import (  # noqa: E402
    BAND,
    PROBE_CALLS,
    SLACK_US,
    Batch,
    BatchClock,
    Calibration,
    GatePage,
    _commitments,
    disagreement,
    fit_calibration,
)


class Affine(torch.nn.Module):
    def forward(self, x, y, k):
        return torch.relu(x * 2.0 + y[:, :1]), k + 1


def base_inputs():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(64, 96, generator=g), torch.randn(64, 3, generator=g), torch.arange(5)]


def test_every_call_is_replayed_exactly_and_committed():
    base = base_inputs()
    kept = [t.clone() for t in base]
    run = BatchRun(torch, "cpu", Affine(), base, 6, keep=True)
    run.queue(cpu_key(torch, 987654321))
    sums = run.finish()
    assert all(torch.equal(a, b) for a, b in zip(base, kept, strict=True)), "the base input set was written"
    for i in range(6):
        replay = Affine()(*perturbed(torch, base, 987654321, 6, i, "cpu"))
        assert all(torch.equal(a, b) for a, b in zip(run.outputs[i], replay, strict=True)), f"call {i} not replayed"
        assert commitments(torch, run.outputs[i]) == sums[i] and len(sums[i]) == 2


def test_every_call_sees_densely_different_inputs_that_the_key_decides():
    base = base_inputs()
    calls = [perturbed(torch, base, 5, 4, i, "cpu") for i in range(4)]
    for i in range(3):
        changed = (calls[i][0] != calls[i + 1][0]).float().mean().item()
        assert changed > 0.99, f"calls {i} and {i + 1} share {1 - changed:.1%} of their values"
    other_key = perturbed(torch, base, 6, 4, 0, "cpu")
    assert (other_key[0] != calls[0][0]).float().mean().item() > 0.99
    ratio = calls[0][0] / base[0]
    assert ratio.min().item() >= 0.75 and ratio.max().item() <= 1.25, "a factor out of its range"
    assert ratio.max().item() - ratio.min().item() > 0.45, "factors too close to 1: a precomputed answer helps"
    assert torch.equal(calls[2][2], base[2]), "integer inputs are kept as they are"
    assert ((calls[0][0] > 0) == (base[0] > 0)).all(), "a sign changed"


@pytest.mark.parametrize("shape", [(64, 96), (300, 500), (8191, 2), (2, 8191 * 2)])
def test_the_factors_are_no_outer_product_that_a_precomputed_product_absorbs(shape):
    """diag(f) X diag(l) @ W = diag(f) (X diag(l) W): factors along rows and columns alone would let
    a product of the base set plus a cheap scaling stand in for the call. The ratio of a call's
    input to the base must be far from rank one, whatever the shape (8191, the period, divides a
    last dimension of 16382: then the rows and columns are scaled instead, which is rank one by
    design but still varies along both)."""
    x = torch.rand(*shape) + 0.5
    ratio = perturbed(torch, [x], 77, 3, 1, "cpu")[0] / x
    values = torch.linalg.svdvals(ratio.double())
    if shape[-1] % 8191:
        assert values[1] / values[0] > 0.01, f"{shape}: the factors are close to an outer product"
    along_rows = (ratio[1:] != ratio[:-1]).float().mean().item()
    along_columns = (ratio[:, 1:] != ratio[:, :-1]).float().mean().item()
    assert along_rows > 0.9 and along_columns > 0.9, f"{shape}: constant along a dimension"


def test_a_strided_input_is_scaled_and_replayed_in_its_own_layout():
    base = [torch.randn(96, 64).t(), torch.randn(64, 3), torch.arange(5)]
    run = BatchRun(torch, "cpu", Affine(), base, 3, keep=True)
    run.queue(cpu_key(torch, 31337))
    run.finish()
    for i in range(3):
        replay = Affine()(*perturbed(torch, base, 31337, 3, i, "cpu"))
        assert all(torch.equal(a, b) for a, b in zip(run.outputs[i], replay, strict=True))
    scaled = perturbed(torch, base, 31337, 3, 0, "cpu")[0]
    assert scaled.stride() == base[0].stride() and not torch.equal(scaled, base[0])


def test_a_checksum_binds_every_byte_and_not_the_layout():
    x = torch.randn(33, 17)
    c = checksum(torch, x)
    y = x.clone()
    y[32, 16] = torch.nextafter(y[32, 16], torch.tensor(1e9))  # one bit of one value
    assert checksum(torch, y) != c
    assert checksum(torch, x.t().contiguous().t()) == c, "the same values in another layout"
    odd = torch.arange(7, dtype=torch.uint8)  # bytes that do not divide into words
    assert checksum(torch, odd).item() == sum(range(7))


def test_calibration_returns_outputs_shaped_as_the_implementations():
    out = Affine()(*base_inputs())
    cal = calibration_module(torch, calibration_template(torch, out))
    got = cal(*base_inputs())
    assert [t.shape for t in got] == [t.shape for t in out] and got[0].dtype == out[0].dtype
    assert all(g.data_ptr() != o.data_ptr() for g, o in zip(got, out, strict=True)), "the harness's own tensors"


def test_gate_page_layout():
    page = GatePage()
    try:
        generation = page.next()
        page.open(0x1234_5678_9ABC, generation)
        assert struct.unpack_from("<I", page.map, 0)[0] == generation == 1
        assert struct.unpack_from("<q", page.map, 8)[0] == 0x1234_5678_9ABC
    finally:
        page.close()


def test_commitments_malformed_by_the_process_are_ones_that_will_not_match():
    assert _commitments("lies", 3) == [[], [], []]
    assert _commitments([[1, 2], "x", [3.5, 4]], 3) == [[1, 2], [], [4]]


def test_the_judges_clock_against_a_reported_figure():
    assert disagreement([100.0, 103.0], 100.0, host_bound=False) == ""
    limit = 100.0 * (1 + BAND) + SLACK_US
    assert disagreement([limit - 0.5, 300.0], 100.0, host_bound=False) == "", "its fastest sample decides"
    reason = disagreement([limit + 1, limit + 5], 100.0, host_bound=False)
    assert "judge's own clock measured at least" in reason
    assert disagreement([300.0], 100.0, host_bound=True) == "", "a host in the loop is not an accusation"


def test_harness_code_replaced_in_place_changes_the_fingerprint():
    import torch.utils.cpp_extension  # noqa: F401 - the fingerprint covers load_inline

    from kcoder.evaluate.candidate.worker import CandidateServer
    from kcoder.evaluate.harness import batchrun

    before = harness_fingerprint(torch, CandidateServer)
    assert harness_fingerprint(torch, CandidateServer) == before, "the fingerprint must be stable"
    original = batchrun.checksum.__code__
    try:
        batchrun.checksum.__code__ = (lambda torch, t: t.sum()).__code__  # same function object, new code
        after = harness_fingerprint(torch, CandidateServer)
        assert after[0] == before[0] and after[1] != before[1]
    finally:
        batchrun.checksum.__code__ = original


def test_the_calibration_is_a_line_under_every_fastest_batch():
    fastest = {1: 0.0012, 16: 0.0020, 64: 0.0041}
    line = fit_calibration(fastest, spread_s=1e-4)
    assert all(line.seconds(n) <= seconds + 1e-12 for n, seconds in fastest.items())
    assert line.per_call_s == pytest.approx((0.0041 - 0.0012) / 63)
    assert Calibration.from_value(line.to_list()) == line
    assert Calibration.from_value([1.0, -2.0, 0.0]) is None and Calibration.from_value("x") is None


def test_the_batches_are_sized_by_the_faster_of_two_probes():
    """The first probe pays what happens once (a fresh arena faulted in, threads woken): sized by
    it alone, a cpu candidate of 0.7 ms a call got batches of 2 calls, and each batch's own start
    doubled its figure."""

    class Scripted(BatchClock):
        def __init__(self, seconds):
            self.cuda, self.seconds, self.sizes = False, list(seconds), []

        def batch(self, n, calibration):
            self.sizes.append(n)
            return Batch(n, self.seconds.pop(0) if self.seconds else 0.0007 * n, 1, 1, [], False)

    line = Calibration(fixed_s=0.0, per_call_s=0.0, spread_s=1e-6)
    clock = Scripted([0.081, 0.0028])
    assert clock.hint_us(line) == pytest.approx(700.0)
    assert clock.sizes == [PROBE_CALLS, PROBE_CALLS]
    clock = Scripted([0.081, 0.0028])
    figure = clock.figure(line, keep_bytes=4 << 20, budget_s=1.0)
    assert figure.n == 71 and figure.samples == pytest.approx([700.0] * 5)
