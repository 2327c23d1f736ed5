"""Tolerance rules: honest rounding passes, shortcuts and degenerate answers fail."""

import pytest
import torch

from kcoder.evaluate.reference.compare import Mismatch, compare_outputs, zeros_would_pass


def _ref(shape=(256, 256), scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * scale


def test_reordered_fp32_sum_passes_strict():
    a, b = _ref((64, 1024), seed=1), _ref((1024, 64), seed=2)
    ref = a @ b
    blocked = sum(a[:, i:i + 128] @ b[i:i + 128] for i in range(0, 1024, 128))
    stats = compare_outputs(blocked, ref, "strict")
    assert stats.rel_norm_err < 1e-5


def test_tf32_like_error_fails_strict_but_passes_relaxed():
    ref = _ref()
    noisy = ref * (1 + 3e-4 * torch.randn_like(ref))
    with pytest.raises(Mismatch):
        compare_outputs(noisy, ref, "strict")
    compare_outputs(noisy, ref, "relaxed")


def test_zeros_fail_on_tiny_outputs():
    ref = _ref(scale=1e-6)
    assert not zeros_would_pass(ref, "strict")
    with pytest.raises(Mismatch, match="outside tolerance|norm"):
        compare_outputs(torch.zeros_like(ref), ref, "strict")


def test_nan_positions_must_match():
    ref = _ref()
    out = ref.clone()
    out[3, 4] = float("nan")
    with pytest.raises(Mismatch, match="NaN positions"):
        compare_outputs(out, ref, "strict")
    ref2 = ref.clone()
    ref2[0, 0] = float("nan")
    compare_outputs(ref2.clone(), ref2, "strict")  # same NaN positions pass


def test_shape_dtype_and_type_are_exact():
    ref = _ref((8, 8))
    with pytest.raises(Mismatch, match="shape"):
        compare_outputs(ref.reshape(64), ref, "strict")
    with pytest.raises(Mismatch, match="dtype"):
        compare_outputs(ref.double(), ref, "strict")
    with pytest.raises(Mismatch, match="plain torch.Tensor"):
        compare_outputs(torch.nn.Parameter(ref.clone()), ref, "strict")
    with pytest.raises(Mismatch, match="structure"):
        compare_outputs(ref, (ref, ref), "strict")


def test_integers_compare_exactly_and_half_is_looser():
    ints = torch.arange(10)
    with pytest.raises(Mismatch, match="exact"):
        compare_outputs(ints + (ints == 3), ints, "strict")
    ref = _ref().half()
    compare_outputs((ref.float() * (1 + 1e-3)).half(), ref, "strict")


def test_chunked_comparison_matches_whole_tensor_figures(monkeypatch):
    """Outputs are compared chunk by chunk (bounded memory at real sizes); the statistics and
    the first bad position must be those of the whole tensor."""
    import torch

    from kcoder.evaluate.reference import compare

    torch.manual_seed(0)
    ref = torch.randn(13, 11)
    out = ref + 1e-7 * torch.randn(13, 11)
    whole = compare.compare_outputs(out, ref, "strict")
    monkeypatch.setattr(compare, "CHUNK", 7)
    chunked = compare.compare_outputs(out, ref, "strict")
    assert chunked.max_abs_err == pytest.approx(whole.max_abs_err)
    assert chunked.rel_norm_err == pytest.approx(whole.rel_norm_err)
    bad = out.clone()
    bad[9, 4] += 1.0
    bad[12, 10] = float("nan")
    with pytest.raises(compare.Mismatch, match="NaN positions differ"):
        compare.compare_outputs(bad, ref, "strict")
    bad[12, 10] = ref[12, 10]
    with pytest.raises(compare.Mismatch, match=r"1 of 143 elements outside tolerance \(first at \(9, 4\)"):
        compare.compare_outputs(bad, ref, "strict")
