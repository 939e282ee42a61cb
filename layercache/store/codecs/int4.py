"""int4 storage: two values a byte, one bfloat16 scale per group of 32 values (symmetric absmax per group).

Each stored vector (one token's state, or one example's pooled vector) is cut into groups of
:data:`GROUP` consecutive values (the last one shorter when the width is not a multiple of 32). A
group's scale is its largest magnitude over 7, and each value is stored as the nearest integer
multiple of that scale in [-7, 7]: a 4-bit two's-complement code (-8 is never used, so zero is exact
and the range symmetric). A value read back is ``code * scale``, within half a step (``scale / 2``,
1/14 of its group's largest magnitude) of what the model produced.

Why groups: one scale per vector (int8's) lets one outlying dimension (a decoder's massive
activation, hundreds of times the rest) set the step of the whole vector, and at 15 levels that
step would swallow every other dimension. With a scale per 32 values an outlier coarsens only its
own group. Why 32: groups of 32 and of 64 kept a weak word-order signal alike in a simulation on
MiniLM states (issue 37), and 32 confines an outlier's damage to 31 neighbours for 1/16 of a byte a
value more. The name ``int4`` fixes the group size (another size would be another codec, registered
under its own name), so no cache needs it recorded and none can be read with the wrong one.

On disk a vector of D values takes ``D / 2`` bytes (``uint8``) and ``ceil(D / 32)`` scales of 2
bytes: 0.281 of float16's bytes at D = 384. Byte ``j`` holds value ``j`` in its low nibble and value
``j + D / 2`` in its high nibble (the two halves of the vector, not neighbours), so unpacking is two
shifts over the whole array and one concatenation, which torch does several times faster on a CPU
than interleaving neighbours. Widths:

- odd widths are refused (:meth:`Int4.width_problem`, one sentence at extraction): D is then
  ``2 x`` the stored width, so a shard's shape says its width and no reader needs it passed in.
  A transformer's width is even (heads x head size), so only a chosen ``--project K`` can be odd,
  and K +- 1 costs nothing;
- a width that is not a multiple of 32 gets a shorter last group (its own scale), nothing padded.

The scales are bfloat16, rounded *up* (so no code is ever clamped): float16's 65,504 would cap a
group's largest magnitude at 7 x 65,504 and its smallest scale at 6e-8, and a clamped value would be
silently wrong; bfloat16 has float32's range, so no scale overflows or vanishes and nothing is
clamped (:attr:`~.base.StorageCodec.limit` is None, like int8's). Its 8 significant bits make a step
at most 0.4 % coarser than ``max / 7`` would be. Stored as uint16 bit patterns through the
bfloat16 codec, like that codec's values.

The cache feed decodes int4 in its gather (:meth:`Int4.served`), to float32 (exact: a 4-bit code
times an 8-bit scale), so heads and mixers receive ordinary float32 states; the page cache and
the disk carry 0.28 of float16's bytes. The pooled vectors beside int4 token states are float16
(:func:`~.base.pooled_dtype_for`), as beside int8.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .base import StorageCodec, register_codec

if TYPE_CHECKING:
    import torch

LEVELS = 7
"""Largest stored magnitude: symmetric, so the code -8 is never used and zero is exact."""
GROUP = 32
"""Consecutive values of a vector that share one scale."""
ROUNDING_SLACK = 2.0**-20
"""Relative slack of :meth:`Int4.error_bound` over half a step: ``x / scale`` is rounded to float32 before it is
rounded to a code, which can move a value exactly between two codes by ``7 x 2^-24`` of a step."""


def group_scales(values: torch.Tensor) -> torch.Tensor:
    """``values (..., D)`` float32 -> each group's scale ``(..., ceil(D / GROUP))``, bfloat16, at least
    ``max|x| / 7`` (rounded up), 0 for an all-zero group."""
    import torch

    D = values.shape[-1]
    n = -(-D // GROUP)
    if n * GROUP != D:  # a shorter last group: zeros never change a largest magnitude
        values = torch.nn.functional.pad(values, (0, n * GROUP - D))
    wanted = values.unflatten(-1, (n, GROUP)).abs().amax(-1) / LEVELS  # (..., n) float32
    scales = wanted.to(torch.bfloat16)  # to nearest ...
    short = scales.float() < wanted
    # ... then up by one unit where that was down: the next bfloat16 is the next bit pattern (positive, finite).
    return torch.where(short, (scales.view(torch.int16) + 1).view(torch.bfloat16), scales)


def per_value(scales: torch.Tensor, dim: int) -> torch.Tensor:
    """Group scales ``(..., n)`` spread over their values: ``(..., dim)`` float32."""
    return scales.float().repeat_interleave(GROUP, dim=-1)[..., :dim]


@register_codec
class Int4(StorageCodec):
    """Symmetric int4 per group of 32 values, two codes a byte; scales as bfloat16 (see the module docstring)."""

    name = "int4"
    torch_dtype_name = "uint8"
    file_dtype = np.dtype(np.uint8)
    scale_dtype = "bfloat16"

    @property
    def bytes_per_value(self) -> float:
        """Half a byte a value (its scales aside)."""
        return 0.5

    def stored_width(self, dim: int) -> int:
        """``dim / 2`` bytes: two codes a byte."""
        return dim // 2

    def scales_width(self, dim: int) -> int:
        """One scale per group of 32 values: ``ceil(dim / 32)``."""
        return -(-dim // GROUP)

    def width_problem(self, dim: int) -> str | None:
        """An odd width cannot be stored: it packs two values into each byte."""
        if dim % 2:
            return "it packs two values into each byte, so the width must be even"
        return None

    def quantize(self, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Float ``values (..., D)`` -> packed codes ``(..., D / 2)`` uint8 and bfloat16 scales
        ``(..., ceil(D / 32))``, on their device."""
        import torch

        values = values.float()
        D = values.shape[-1]
        if self.width_problem(D):
            raise ValueError(f"int4 stores an even number of values per vector, got {D}")
        scales = group_scales(values)  # (..., n)
        step = per_value(scales, D)  # (..., D)
        step = torch.where(step > 0, step, torch.ones_like(step))  # an all-zero group stores zeros
        codes = torch.round(values / step).clamp_(-LEVELS, LEVELS).to(torch.int8)  # (..., D)
        nibbles = (codes & 15).to(torch.uint8)  # two's complement in 4 bits
        half = D // 2
        return nibbles[..., :half] | (nibbles[..., half:] << 4), scales  # (..., D / 2): value j low, j + D/2 high

    def dequantize(self, stored: torch.Tensor, scales: torch.Tensor | None) -> torch.Tensor:
        """Packed codes ``(..., W)`` and their scales ``(..., ceil(2W / 32))`` as float32 ``(..., 2W)``, on the
        codes' device."""
        import torch

        scales = self.require_scales(scales)
        packed = stored.view(torch.int8)  # (..., W): arithmetic shifts sign-extend each nibble
        codes = torch.cat([(packed << 4) >> 4, packed >> 4], dim=-1)  # (..., 2W) int8: low nibbles, then high
        out = codes.to(torch.float32)
        D = out.shape[-1]
        scales = scales.to(out.device)  # (..., n)
        if D % GROUP == 0:
            out.unflatten(-1, (D // GROUP, GROUP)).mul_(scales.float().unsqueeze(-1))  # (..., n, 32) in place
        else:
            out.mul_(per_value(scales, D))
        return out

    def served(self, stored: torch.Tensor, scales: torch.Tensor | None) -> tuple[torch.Tensor, None]:
        """Decoded in the feed's gather: float32 ``(..., D)``, no scales (a mixer cannot widen nibbles)."""
        return self.dequantize(stored, scales), None

    def decode(self, array: np.ndarray, scales: np.ndarray | None = None) -> np.ndarray:
        """Packed codes ``(..., W)`` and their scales as read (bfloat16 bit patterns) as float32 numpy ``(..., 2W)``."""
        return self.widen(array, self.require_scales(scales)).numpy()

    def round(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` quantised and dequantised: float32, exactly what an int4 cache serves."""
        return self.dequantize(*self.quantize(values))

    def error_bound(self, values: torch.Tensor) -> torch.Tensor:
        """Half a step of each value's group, ``(..., D)``: ``scale / 2`` (and the float32 slack of
        :data:`ROUNDING_SLACK`), where ``scale`` is the group's bfloat16 scale, at most 0.4 % above
        ``max|x| / 7``."""
        values = values.float()
        return per_value(group_scales(values), values.shape[-1]) * (0.5 + ROUNDING_SLACK)
