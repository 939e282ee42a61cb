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
    progress: bool = option_field(True)
