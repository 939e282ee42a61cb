"""The CPU dropout: its rate, its scaling, its gradient, and that a seed repeats it."""

from __future__ import annotations

import pytest
import torch

from layercache.heads.blocks.dropout import Dropout, keep_mask


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_drop_rate_and_expectation(p):
    torch.manual_seed(0)
    x = torch.ones(200, 1000)
    y = Dropout(p).train()(x)
    dropped = float((y == 0).float().mean())
    assert dropped == pytest.approx(p, abs=0.005)  # 200k draws: the standard error is ~0.001
    assert float(y.mean()) == pytest.approx(1.0, abs=0.01)  # inverted dropout keeps the expectation
    torch.testing.assert_close(y[y != 0], torch.full_like(y[y != 0], 1 / (1 - p)), rtol=1e-4, atol=0)


def test_gradient_is_the_mask_and_eval_is_identity():
    torch.manual_seed(1)
    layer = Dropout(0.3).train()
    x = torch.randn(50, 40, requires_grad=True)
    y = layer(x)
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.where(y != 0, y / x.detach(), torch.zeros_like(y)))
    assert layer.eval()(x) is x
    assert Dropout(0.0).train()(x) is x


def test_seeded_masks_repeat_and_differ_between_calls():
    torch.manual_seed(3)
    a, b = keep_mask((64, 64), 0.2), keep_mask((64, 64), 0.2)
    torch.manual_seed(3)
    a2 = keep_mask((64, 64), 0.2)
    assert torch.equal(a, a2) and not torch.equal(a, b)
    values = torch.unique(a).tolist()  # dropped, or kept with the inverse keep rate
    assert len(values) == 2 and values[0] == 0.0 and values[1] == pytest.approx(1 / (1 - 0.2), rel=1e-4)


def test_other_float_dtypes_keep_their_dtype():
    torch.manual_seed(4)
    for dtype in (torch.float64, torch.bfloat16):
        x = torch.ones(30, 30, dtype=dtype)
        y = Dropout(0.5).train()(x)
        assert y.dtype == dtype and 0 < int((y == 0).sum()) < 900


def test_bad_probability_is_refused():
    with pytest.raises(ValueError, match="dropout probability"):
        Dropout(1.0)
