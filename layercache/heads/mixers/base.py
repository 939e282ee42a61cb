"""What every layer mixer shares: :class:`LayerMixer`, :class:`MixOutput`, token means, registration.

A mixer reads ``states`` of shape ``(B, T, S, D)`` — B examples, T tokens (T = 1 for pooled
vectors), S cached states in order (embeddings first, then layers 1..L), D hidden width — and a
``mask`` of shape ``(B, T)`` (True = real token), and returns a :class:`MixOutput` whose ``mixed``
tensor ``(B, T, D_out)`` feeds a task head. States of an int8 cache come as stored, with their
``scales (B, T, S, 1)`` beside them (:func:`dequantized`): a mixer that widens its own inputs multiplies
them in the pass that widens, the others receive them dequantised.

Behaviour that differs per mixer (a spec argument, the default learning rate and task heads, what
happens as training progresses, usage statistics) is a class attribute or method of
:class:`LayerMixer` with a neutral default, overridden by the mixer that needs it: code outside
this package asks the mixer, never compares its name.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import ClassVar, TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from layercache.errors import ConfigError
from layercache.heads.blocks.normalize import standardized
from layercache.heads.mixers.registry import MIXERS, spec_form


def dequantized(values: Tensor, scales: Tensor | None, dtype: torch.dtype) -> Tensor:
    """``values`` in ``dtype``, multiplied by ``scales`` when given (an int8 cache's factors, one per token and
    state, broadcast over the width). Never changes ``values`` itself."""
    if scales is None:
        return values.to(dtype)
    if values.dtype == dtype:
        return values * scales.to(dtype)
    return values.to(dtype).mul_(scales.to(dtype))  # a fresh copy: scaled in place


@dataclass
class MixOutput:
    """What a mixer returns for one batch.

    Attributes:
        mixed: ``(B, T, D_out)`` the mixed states, zero at padded positions.
        aux_loss: scalar tensor to add to the task loss (entropy penalty, budget penalty, ponder
            cost); a zero tensor for mixers without one.
        usage: per-token / per-example layer use for reports, or None for mixers whose weights do
            not depend on the input. Keys used here: ``weights`` ``(B, T, S)`` or ``(B, S)``,
            ``choices`` ``(B, S)``, ``steps`` and ``depth`` ``(B, T)``. Detached from the graph.
    """

    mixed: Tensor
    aux_loss: Tensor
    usage: dict[str, Tensor] | None = None


def bare_layer_norm(x: Tensor) -> Tensor:
    """Layer norm over the last dimension without a learned scale or shift."""
    return F.layer_norm(x, x.shape[-1:])


def mean_mask(mask: Tensor, skip_first: bool = False) -> Tensor:
    """The tokens a token mean averages: ``mask (B, T)``, without the first token when ``skip_first``.

    The first token is left out only of examples with another real token (a one-token example
    keeps it), as a cache whose manifest records ``mean_skip_first`` pools: a decoder's first token
    (BOS, the attention sink) carries huge values that have little to do with the text.
    """
    if not skip_first or mask.shape[1] < 2:
        return mask
    first = mask[:, :1] & ~mask[:, 1:].any(1, keepdim=True)  # (B, 1) kept only when it is alone
    return torch.cat([first, mask[:, 1:]], dim=1)  # (B, T)


def masked_mean(x: Tensor, mask: Tensor, skip_first: bool = False) -> Tensor:
    """Mean of ``x (B, T, ...)`` over real tokens (see :func:`mean_mask`); no real token gives zeros."""
    mask = mean_mask(mask, skip_first)
    m = mask.to(x.dtype).reshape(*mask.shape, *([1] * (x.dim() - 2)))  # (B, T, 1...)
    count = m.sum(1).clamp_min(1.0)  # (B, 1...)
    return (x * m).sum(1) / count  # (B, ...)


class LayerMixer(nn.Module):
    """Base class of all layer mixers: validates inputs and keeps the layer-use statistics.

    Subclasses implement :meth:`_mix` and :meth:`layer_weights`. Hyper-parameters are keyword-only
    ``__init__`` arguments stored under the same attribute name, so :meth:`get_config` can list them
    and :func:`~layercache.heads.mixers.registry.make_mixer` can rebuild the mixer from that config.
    A subclass is listed in the registry with :func:`register_mixer`.
    """

    name: ClassVar[str] = ""
    #: True for mixers whose weights depend on the input; they keep a running mean of their usage.
    input_dependent: ClassVar[bool] = False
    #: True for mixers that widen half-precision states themselves (fused with their own re-layout),
    #: and standardise them in the same place when given ``standardize``; the others receive states
    #: already in their parameters' dtype.
    widens_own_inputs: ClassVar[bool] = False
    #: Token means leave out each example's first token (a model-wide setting that
    #: :class:`~layercache.heads.network.model.HeadModel` sets from the cache, not a mixer option).
    mean_skip_first: bool = False
    #: Placeholder of the argument a spec gives after a colon (``"<i>"`` for ``layer:<i>``), parsed by
    #: :meth:`spec_options`; None for mixers whose spec is their name alone.
    spec_argument: ClassVar[str | None] = None
    #: True for mixers with learned projections, which a linear head's default learning rate (1e-2)
    #: would overshoot; a head model with one trains at 1e-3 unless told otherwise.
    prefers_low_lr: ClassVar[bool] = False
    #: The summaries of an evaluation pass that :meth:`usage_totals` feeds: key (as written to a
    #: run's metrics.json and layer_weights.json) -> the label a report prints before the value.
    usage_labels: ClassVar[dict[str, str]] = {}
    #: How messages name this mixer where it reads one pooled vector exactly as it reads every token
    #: (see :meth:`commutes_with_token_mean`), e.g. ``"scalar without layer_norm"``; None where it needs tokens.
    pooled_form: ClassVar[str | None] = None
    #: Variants of this mixer's options that ``layercache sweep`` tries besides its defaults, each merged
    #: over them: a width and a temperature below and above the default, where the mixer has them
    #: (:mod:`layercache.heads.sweeps.sweep`). Empty: the defaults only.
    sweep_options: ClassVar[tuple[dict, ...]] = ()
    #: True for mixers that decide per token how many states it reads (adaptive computation time): a
    #: trained head's per-token depth (:mod:`layercache.heads.token_usage`), which the probe report breaks
    #: down by token category. The report finds such mixers in the registry, never by name.
    per_token_depth: ClassVar[bool] = False

    def __init__(self, n_states: int, dim: int) -> None:
        super().__init__()
        if not isinstance(n_states, int) or n_states < 1:
            raise ConfigError(f"n_states must be a positive int, got {n_states!r}")
        if not isinstance(dim, int) or dim < 1:
            raise ConfigError(f"dim must be a positive int, got {dim!r}")
        self.n_states = n_states
        self.dim = dim
        if self.input_dependent:
            # Persistent, so a head loaded from disk still reports the weights it was evaluated with.
            self.register_buffer("usage_sum", torch.zeros(n_states))  # (S,)
            self.register_buffer("usage_count", torch.zeros((), dtype=torch.long))
            self._last_batch_usage: np.ndarray | None = None
            self._new_pass = True

    # ----------------------------------------------------------------------------------- API
    @property
    def out_dim(self) -> int:
        """Width ``D_out`` of :attr:`MixOutput.mixed`."""
        return self.dim

    @property
    def spec(self) -> str:
        """The string :func:`~layercache.heads.mixers.registry.make_mixer` parses to build this kind of mixer."""
        return self.name

    @classmethod
    def spec_form(cls) -> str:
        """How a spec for this mixer is written in lists of choices and messages: ``scalar``, ``layer:<i>``."""
        return spec_form(cls.name, cls.spec_argument)

    @classmethod
    def spec_options(cls, spec: str, argument: str | None, options: dict) -> dict:
        """``options`` completed from the ``:<argument>`` part of ``spec`` (``argument`` None when absent).

        Called only with an argument for mixers that declare :attr:`spec_argument`; the default
        takes none and returns ``options`` as given.
        """
        return options

    @classmethod
    def sweep_specs(cls, n_states: int) -> list[str]:
        """The specs a sweep tries this mixer as, at its default options, for a cache of ``n_states`` states.

        The mixer's name; none for a mixer whose spec needs an argument, unless it says which ones.
        """
        return [] if cls.spec_argument is not None else [cls.name]

    @classmethod
    def default_head_options(cls, task_kind: str) -> dict:
        """Task-head settings when the user gives none: a linear head, mean-pooling for sequence tasks."""
        return {} if task_kind == "token" else {"pooling": "mean"}

    def training_progress(self, fraction: float) -> None:
        """Told before every training step how far training is, ``fraction`` in [0, 1]; nothing by default."""

    def usage_totals(self, usage: dict[str, Tensor], mask: Tensor) -> dict[str, tuple[float, int]]:
        """One batch's share of each summary in :attr:`usage_labels`: key -> (sum, count).

        ``usage`` is the batch's :attr:`MixOutput.usage`, ``mask (B, T)`` its real tokens. Over an
        evaluation pass each summary is the sum of its sums over the sum of its counts. Empty for
        mixers without usage summaries.
        """
        return {}

    def get_config(self) -> dict:
        """``{"spec", "n_states", "dim", "options"}`` (JSON-ready); :func:`mixer_from_config` rebuilds it."""
        params = inspect.signature(type(self).__init__).parameters.values()
        options = {p.name: getattr(self, p.name) for p in params if p.kind is p.KEYWORD_ONLY}
        return {"spec": self.spec, "n_states": self.n_states, "dim": self.dim, "options": options}

    def commutes_with_token_mean(self) -> bool:
        """Whether mixing then averaging over tokens equals averaging then mixing.

        True for mixers that are the same linear map at every token; a trainer may then feed them
        the cache's mean-pooled vectors (T = 1) instead of every token, with identical results.
        """
        return False

    def is_fixed_map(self) -> bool:
        """Whether this mixer learns nothing: a map of the states that no training changes.

        A linear head on a fixed map is a convex problem, which a full-batch solver fits exactly
        (:mod:`~layercache.heads.training.convex`) where minibatches only approach it. True for a mixer
        without parameters (``last``, ``layer:<i>``); a mixer with parameters that are not trained
        would override it.
        """
        return next(self.parameters(), None) is None

    def layer_params(self) -> list[nn.Parameter]:
        """Parameters that encode the global layer weights.

        A trainer gives them their own parameter group with weight decay 0: decay would pull the
        weight logits toward 0, i.e. toward a uniform mix, fighting the very thing being learned.
        Empty for mixers without such parameters.
        """
        return []

    def layer_weights(self) -> np.ndarray | None:
        """Global weight of each state, shape ``(S,)``, summing to 1.

        Input-dependent mixers return the mean of their per-token (``attention``, ``act``) or
        per-example (``gumbel``) mixing weights over the most recent evaluation pass: every forward
        in eval mode since the module last switched from train to eval mode, counting real tokens
        only. Before any eval forward they fall back to the last training batch, and before any
        forward at all they return None (there is nothing to average yet).
        """
        if not self.input_dependent:
            raise NotImplementedError
        if int(self.usage_count) > 0:
            return (self.usage_sum / self.usage_count).double().cpu().numpy()
        return self._last_batch_usage

    def reset_usage(self) -> None:
        """Forget the usage statistics behind :meth:`layer_weights` (input-dependent mixers)."""
        if self.input_dependent:
            self.usage_sum.zero_()
            self.usage_count.zero_()
            self._last_batch_usage = None

    def train(self, mode: bool = True) -> LayerMixer:
        """Switch train / eval mode as :meth:`torch.nn.Module.train` does; eval mode starts a new usage pass."""
        # Entering eval mode starts a new evaluation pass; the old statistics are replaced lazily
        # at the first eval forward, so weights loaded from disk survive a bare ``.eval()``.
        if self.input_dependent and self.training and not mode:
            self._new_pass = True
        return super().train(mode)

    def forward(self, states: Tensor, mask: Tensor | None = None, *, scales: Tensor | None = None,
                standardize: tuple[Tensor, Tensor] | None = None) -> MixOutput:
        """Mix ``states (B, T, S, D)`` under ``mask (B, T)`` (None = every token is real).

        ``scales``: ``(B, T, S, 1)``, for states stored as int8: the states are ``states · scales``
        (:func:`dequantized`). A mixer that widens its own inputs applies them in that pass.
        ``standardize``: ``(shift, scale)``, each ``(S, D)``: mix ``h · scale + shift`` instead of ``h``
        (:func:`~layercache.heads.blocks.normalize.standardized`). A mixer that widens its own inputs applies
        it in that pass, to the states it reads.
        """
        states, mask, scales = self._check_inputs(states, mask, scales)
        if self.widens_own_inputs:
            out = self._mix(states, mask, standardize=standardize, scales=scales)
        elif standardize is None:
            out = self._mix(states, mask)
        else:
            out = self._mix(standardized(states, *standardize), mask)
        # Zero the padding with where (not a product): an inf/NaN at a padded position stays there.
        mixed = torch.where(mask.unsqueeze(-1), out.mixed, torch.zeros_like(out.mixed))  # (B, T, D_out)
        return MixOutput(mixed=mixed, aux_loss=out.aux_loss, usage=out.usage)

    # ------------------------------------------------------------------------------ internals
    def _mix(self, states: Tensor, mask: Tensor) -> MixOutput:
        raise NotImplementedError

    def _check_inputs(self, states: Tensor, mask: Tensor | None,
                      scales: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor | None]:
        if not torch.is_tensor(states) or states.dim() != 4:
            shape = tuple(states.shape) if torch.is_tensor(states) else type(states).__name__
            raise ValueError(f"states must be a (B, T, S, D) tensor, got {shape}")
        B, T, S, D = states.shape
        if S != self.n_states or D != self.dim:
            raise ValueError(
                f"states have S={S} states of width D={D}, but this {self.name!r} mixer was built "
                f"for S={self.n_states}, D={self.dim} (every cached state needs its own weight; "
                "a mismatch would silently drop or misalign layers)"
            )
        if scales is not None and tuple(scales.shape) != (B, T, S, 1):
            raise ValueError(f"scales must have shape (B, T, S, 1) = {(B, T, S, 1)}, got {tuple(scales.shape)}")
        if not states.is_floating_point() and scales is None:
            raise ValueError(f"states must be a floating-point tensor (or int8 with scales), got dtype {states.dtype}")
        if mask is None:
            mask = torch.ones(B, T, dtype=torch.bool, device=states.device)
        elif tuple(mask.shape) != (B, T):
            raise ValueError(f"mask must have shape (B, T) = {(B, T)}, got {tuple(mask.shape)}")
        mask = mask.to(device=states.device, dtype=torch.bool)
        # Caches store fp16/bf16 (or int8 with scales); compute in the mixer's own precision.
        if not self.widens_own_inputs and (scales is not None or states.dtype != self.compute_dtype):
            states, scales = dequantized(states, scales, self.compute_dtype), None
        return states, mask, scales

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype a mixer computes in: its parameters', or torch's default for one without any."""
        param = next(self.parameters(), None)
        return torch.get_default_dtype() if param is None else param.dtype

    def _zero(self, like: Tensor) -> Tensor:
        return like.new_zeros(())

    @torch.no_grad()
    def _track_usage(self, weights: Tensor, mask: Tensor) -> None:
        """Accumulate mixing ``weights`` — ``(B, T, S)`` per token or ``(B, S)`` per example."""
        if weights.dim() == 3:
            m = mask.unsqueeze(-1).to(weights.dtype)  # (B, T, 1)
            total = (weights * m).sum((0, 1))  # (S,)
            count = int(mask.sum())
        else:
            total = weights.sum(0)  # (S,)
            count = weights.shape[0]
        if count == 0:
            return
        if self.training:
            self._last_batch_usage = (total / count).double().cpu().numpy()
            return
        if self._new_pass:
            self.usage_sum.zero_()
            self.usage_count.zero_()
            self._new_pass = False
        self.usage_sum += total.to(self.usage_sum.dtype)
        self.usage_count += count


M = TypeVar("M", bound=type[LayerMixer])


def register_mixer(cls: M) -> M:
    """Class decorator: list a :class:`LayerMixer` subclass in the registry (:data:`~.registry.MIXERS`) under its
    ``name``.

    The registry imports every module of this package that :data:`~.registry.DECLARED` does not name, so a new
    mixer is one new module whose class carries this decorator (declaring it there lists it without an import).
    """
    if not (isinstance(cls, type) and issubclass(cls, LayerMixer)) or not cls.name:
        raise TypeError(f"only LayerMixer subclasses with a name can be registered, got {cls!r}")
    return MIXERS.add(cls.name, cls)
