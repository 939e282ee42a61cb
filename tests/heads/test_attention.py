"""The written-out attention equals torch's own modules and ignores padding."""

import pytest
import torch
from torch import nn

from layercache.heads.network import attention
from layercache.heads.network.attention import MIN_KEYS, EncoderLayer, SelfAttention, fit_heads


def _batch(B=4, T=7, D=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, D, generator=g)
    lengths = torch.tensor([T, 1, 4, T - 2])[:B]
    mask = torch.arange(T)[None, :] < lengths[:, None]  # (B, T)
    return x, mask


@pytest.mark.parametrize("heads, T", [(1, 7), (4, 7), (16, 7), (4, MIN_KEYS + 3)])
def test_self_attention_equals_multihead_attention(heads, T):
    torch.manual_seed(0)
    x, mask = _batch(T=T, D=16)
    ours = SelfAttention(16, heads).eval()
    theirs = nn.MultiheadAttention(16, heads, batch_first=True).eval()
    with torch.no_grad():
        theirs.in_proj_weight.copy_(ours.qkv.weight)
        theirs.in_proj_bias.copy_(ours.qkv.bias)
        theirs.out_proj.weight.copy_(ours.out.weight)
        theirs.out_proj.bias.copy_(ours.out.bias)
        expected, _ = theirs(x, x, x, key_padding_mask=~mask, need_weights=False)
        got = ours(x, mask)
    torch.testing.assert_close(got[mask], expected[mask], atol=1e-5, rtol=1e-5)


def test_encoder_layer_equals_pre_norm_transformer_layer():
    torch.manual_seed(0)
    x, mask = _batch(D=16)
    ours = EncoderLayer(16, 4, 32, dropout=0.1).eval()
    theirs = nn.TransformerEncoderLayer(16, 4, 32, 0.1, activation="gelu", batch_first=True, norm_first=True).eval()
    pairs = {"norm1": "norm1", "norm2": "norm2", "ff1": "linear1", "ff2": "linear2"}
    with torch.no_grad():
        for mine, torchs in pairs.items():
            getattr(theirs, torchs).load_state_dict(getattr(ours, mine).state_dict())
        theirs.self_attn.in_proj_weight.copy_(ours.attention.qkv.weight)
        theirs.self_attn.in_proj_bias.copy_(ours.attention.qkv.bias)
        theirs.self_attn.out_proj.load_state_dict(ours.attention.out.state_dict())
        expected = theirs(x, src_key_padding_mask=~mask)
        got = ours(x, mask)
    torch.testing.assert_close(got[mask], expected[mask], atol=1e-5, rtol=1e-5)


def test_padding_never_reaches_real_tokens_and_gradients_flow():
    torch.manual_seed(0)
    x, mask = _batch(D=16)
    layer = EncoderLayer(16, 4, 32, dropout=0.0)
    noisy = torch.where(mask[..., None], x, torch.full_like(x, 1e4))  # huge values at padded positions
    torch.testing.assert_close(layer(x, mask)[mask], layer(noisy, mask)[mask])
    x.requires_grad_(True)
    layer(x, mask)[mask].sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad[mask].abs().sum() > 0
    assert x.grad[~mask].abs().max() == 0  # padded keys get no weight, so no gradient


def test_short_batches_attend_over_zero_keys_that_change_nothing(monkeypatch):
    # Fewer than MIN_KEYS tokens: the keys are padded with zero keys and values masked like padding (torch's CPU
    # softmax is 9x slower on rows shorter than its vector width); the outputs and gradients are the unpadded ones.
    torch.manual_seed(0)
    x, mask = _batch(T=5, D=16)
    layer = SelfAttention(16, 4)
    x.requires_grad_(True)
    padded = layer(x, mask)
    padded[mask].sum().backward()
    grad_padded, x.grad = x.grad.clone(), None
    monkeypatch.setattr(attention, "MIN_KEYS", 1)
    plain = layer(x, mask)
    plain[mask].sum().backward()
    torch.testing.assert_close(padded[mask], plain[mask], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(grad_padded, x.grad, atol=1e-6, rtol=1e-6)


def test_a_row_of_padding_only_stays_finite():
    x, mask = _batch(D=16)
    mask[1] = False
    out = SelfAttention(16, 4)(x, mask)
    assert torch.isfinite(out).all()


def test_fit_heads_divides_the_width():
    assert fit_heads(64, 16) == 16 and fit_heads(60, 16) == 15 and fit_heads(7, 4) == 1 and fit_heads(3, 8) == 3
    with pytest.raises(ValueError, match="divide"):
        SelfAttention(10, 4)
