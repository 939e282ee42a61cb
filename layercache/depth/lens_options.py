"""A tuned lens's settings, each declared once: :class:`~layercache.depth.tuned_lens.TunedLens`'s keywords, their
defaults, the rules their values follow and their flags (:mod:`layercache.core.option_specs`), as
:class:`~layercache.heads.head_options.HeadOptions` declares a head's. This module imports no torch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..core.devices import DEFAULT_DEVICE, DEVICE_FLAG
from ..core.layers import LayerSpec
from ..core.option_specs import Constraint, Flag, at_least, option_field, option_spec, positive

OBJECTIVES = ("kl", "least_squares")
"""How a lens fits its translators: the tuned lens's KL (Belrose et al. 2023), or the linear shortcut's least squares
(Din et al. 2023)."""
LOGITS_DTYPES = ("float32", "bfloat16")
"""The dtypes of the logits' matmul (``logits_dtype``): bfloat16 rounds the translated state, the unembedding and the
logits to bfloat16 for the matmul alone (the log-softmax, KL and cross-entropy sum in float32), for a GPU's bfloat16
rate. Measured against float32 (tests/depth/test_lens_devices.py, benchmarks/README.md): each layer's KL within 6e-4
nats, cross-entropy within 0.008 bits; top-1 agreement moves by up to 2% where the top two logits nearly tie."""


@option_spec(shared=False)  # epochs, lr, seed ... are a head's flags in messages
@dataclass(frozen=True)
class LensOptions:
    """The keywords of :class:`~layercache.depth.tuned_lens.TunedLens`, in its order, with its defaults."""

    layers: Sequence[LayerSpec] | None = option_field(None)
    objective: str = option_field("kl", Flag(
        "--lens-objective", "How the lens's translators are fitted.",
        "kl: the tuned lens, each layer's KL to the final distribution by Adam; least_squares: the linear shortcut, "
        "a least-squares map to the last state in closed form."),
        check=Constraint(lambda v: v in OBJECTIVES, f"must be one of {', '.join(OBJECTIVES)}"))
    epochs: int = option_field(3, Flag("--lens-epochs", "Passes over the training tokens (kl)."),
                               check=at_least(1, whole=True))
    lr: float = option_field(1e-3, Flag("--lens-lr", "Adam's learning rate (kl)."), check=positive())
    batch_tokens: int = option_field(256, Flag("--lens-batch-tokens", "Tokens per minibatch (kl)."),
                                     check=at_least(1, whole=True))
    max_tokens: int | None = option_field(None, Flag(
        "--lens-max-tokens", "Fit on a seeded sample of examples with at most about N tokens.", show_default="all"),
        check=at_least(1, whole=True, optional=True))
    ridge: float = option_field(1e-3, check=at_least(0))
    seed: int = option_field(0)
    device: str = option_field(DEFAULT_DEVICE, DEVICE_FLAG)
    logits_dtype: str = option_field("float32", Flag(
        "--lens-logits-dtype", "The dtype of the lenses' logits matmul (fit and scores).",
        "float32, or bfloat16: the state and the unembedding rounded for the matmul alone, the softmax and KL in "
        "float32; a GPU's bfloat16 rate (on a CPU without bfloat16 units, slower), KL within 1e-3 nats of float32's "
        "where measured."),
        check=Constraint(lambda v: v in LOGITS_DTYPES, f"must be one of {', '.join(LOGITS_DTYPES)}"))
    progress: bool = option_field(True)
