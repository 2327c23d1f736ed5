"""The float64 rule (compare64.py): a correct summation order of a cancellation output passes,
wrong answers still fail, and the float32 rule's verdicts stand everywhere else."""

import pytest
import torch

from kcoder.evaluate.reference.compare import Mismatch, ToleranceMismatch, compare_outputs
from kcoder.evaluate.reference.compare64 import (
    Float64Unavailable,
    compare_float64,
    float64_applies,
    float64_model,
    second_opinion,
    upcast,
)


class GroupNormMean(torch.nn.Module):
    """The mean of group-normalized values plus a small bias (~1e-4): the normalized part
    cancels to zero, and float32's rounding of it (~5e-8) is more than its tolerance allows."""

    def __init__(self, channels: int = 32, groups: int = 8) -> None:
        super().__init__()
        self.gn = torch.nn.GroupNorm(groups, channels)
        with torch.no_grad():
            g = torch.Generator().manual_seed(3)
            self.gn.bias.copy_(1e-4 + 1e-5 * torch.rand(channels, generator=g))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gn(x).mean(dim=(1, 2, 3))


def _reordered(x: torch.Tensor, gn: torch.nn.GroupNorm) -> torch.Tensor:
    """The same module computed in float32 in another summation order (a correct kernel)."""
    b, c, h, w = x.shape
    xg = x.reshape(b, gn.num_groups, -1)
    n = xg.shape[-1]
    mean = xg.flip(-1).reshape(b, gn.num_groups, 4, -1).sum(-1).sum(-1) / n
    centered = xg - mean[..., None]
    var = centered.square().reshape(b, gn.num_groups, 4, -1).sum(-1).sum(-1) / n
    y = (centered / torch.sqrt(var[..., None] + gn.eps)).reshape(b, c, h, w)
    y = y * gn.weight[None, :, None, None] + gn.bias[None, :, None, None]
    return y.permute(0, 3, 2, 1).reshape(b, -1).flip(-1).reshape(b, 16, -1).sum(-1).sum(-1) / (c * h * w)


@pytest.fixture(scope="module")
def cancellation():
    torch.manual_seed(0)
    model = GroupNormMean()
    x = torch.randn(64, 32, 16, 16) * 2 + 3
    with torch.no_grad():
        return model(x), float64_model(model)(upcast(x)), _reordered(x, model.gn)


def _judge(out, ref, ref64):
    """The reference process's decision: the float32 rule, else the float64 rule."""
    try:
        return compare_outputs(out, ref, "strict"), ""
    except Mismatch as exc:
        return second_opinion(exc, out, ref, lambda: ref64, "strict")


def test_correct_summation_order_passes_by_the_float64_rule(cancellation):
    ref, ref64, out = cancellation
    with pytest.raises(ToleranceMismatch):  # the float32 rule alone refuses a correct kernel
        compare_outputs(out, ref, "strict")
    stats, rule = _judge(out, ref, ref64)
    assert "accepted by the float64 rule" in rule and "4x eager float32's own" in rule
    assert stats.tolerance["float64_factor"] == 4.0
    assert 0 < stats.max_abs_err < 4 * float((ref.double() - ref64).abs().max())


@pytest.mark.parametrize("wrong", ["zeros", "ten_times_eager_error", "off_by_1_percent"])
def test_wrong_answers_fail_both_rules(cancellation, wrong):
    ref, ref64, out = cancellation
    bad = {"zeros": torch.zeros_like(ref),
           "ten_times_eager_error": (ref64 + 10 * (ref.double() - ref64)).float(),
           "off_by_1_percent": out * 1.01}[wrong]
    with pytest.raises(Mismatch, match="outside tolerance.*against Model run in float64"):
        _judge(bad, ref, ref64)


def test_off_by_1e3_relative_fails_where_eager_is_accurate():
    torch.manual_seed(1)
    a, b = torch.randn(64, 256), torch.randn(256, 64)
    ref, ref64 = a @ b, a.double() @ b.double()
    with pytest.raises(Mismatch, match="against Model run in float64"):
        _judge(ref * 1.001, ref, ref64)


def test_the_float32_rule_still_decides_what_it_accepts_and_what_is_not_values(cancellation):
    ref, ref64, out = cancellation
    exact = ref.clone()
    assert _judge(exact, ref, ref64)[1] == ""  # accepted by the float32 rule: no float64 run needed
    with pytest.raises(Mismatch, match="shape") as refused:  # structure is never a float64 question
        _judge(out[:10], ref, ref64)
    assert "float64" not in str(refused.value)
    nan = out.clone()
    nan[0] = float("nan")
    with pytest.raises(Mismatch, match="NaN positions"):
        _judge(nan, ref, ref64)


def test_each_output_leaf_passes_one_rule_and_the_note_names_the_leaf(cancellation):
    ref, ref64, out = cancellation
    plain = torch.randn(8, 8)
    stats, rule = _judge((plain.clone(), out), (plain, ref), (plain.double(), ref64))
    assert rule.startswith("output[1] accepted by the float64 rule"), rule
    with pytest.raises(Mismatch, match=r"output\[0\]"):
        _judge((plain + 1e-2, out), (plain, ref), (plain.double(), ref64))


def test_the_rule_applies_to_float32_outputs_only_and_says_when_it_could_not_run(cancellation):
    ref, ref64, out = cancellation
    assert float64_applies(ref) and not float64_applies(ref.double()) and not float64_applies(torch.arange(3))
    refusal = ToleranceMismatch("output: 64 elements outside tolerance")
    with pytest.raises(Mismatch, match="could not be applied: too large"):
        second_opinion(refusal, out, ref, lambda: (_ for _ in ()).throw(Float64Unavailable("too large")), "strict")
    with pytest.raises(Mismatch, match="float64 run gave torch.float32"):
        compare_float64(out, ref, ref64.float(), "strict", str(refusal))
    with pytest.raises(Mismatch, match="not finite"):
        compare_float64(out, ref, torch.full_like(ref64, float("inf")), "strict", str(refusal))


def test_chunked_float64_comparison_matches_whole_tensor(cancellation, monkeypatch):
    from kcoder.evaluate.reference import compare

    ref, ref64, out = cancellation
    whole = compare_float64(out, ref, ref64, "strict")[0]
    monkeypatch.setattr(compare, "HOST_CHUNK", 7)
    chunked = compare_float64(out, ref, ref64, "strict")[0]
    assert chunked.max_abs_err == whole.max_abs_err
    assert chunked.rel_norm_err == pytest.approx(whole.rel_norm_err, rel=1e-9)
