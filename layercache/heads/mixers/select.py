"""Single-state mixers: ``layer:<i>`` reads one cached state unchanged, ``last`` the last one."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from layercache.errors import ConfigError
from layercache.heads.blocks.normalize import standardized
from layercache.heads.mixers.base import LayerMixer, MixOutput, dequantized, register_mixer


class SelectLayer(LayerMixer):
    """One cached state, unchanged: ``layer:<i>`` (0 = embeddings, negative counts from the end)."""

    name: ClassVar[str] = "layer"
    spec_argument: ClassVar[str | None] = "<i>"
    pooled_form: ClassVar[str | None] = "layer:<i>"
    widens_own_inputs: ClassVar[bool] = True  # one state of S: widen only that one

    def __init__(self, n_states: int, dim: int, *, index: int = -1) -> None:
        super().__init__(n_states, dim)
        if not isinstance(index, int) or not -n_states <= index < n_states:
            raise ConfigError(
                f"layer index {index!r} is out of range for {n_states} cached states: "
                f"valid indexes are 0..{n_states - 1} (0 = embeddings) or -{n_states}..-1"
            )
        self.index = index

    @classmethod
    def spec_options(cls, spec: str, argument: str | None, options: dict) -> dict:
        """``index`` from ``layer:<i>``; a bare ``layer`` needs ``index`` among the options."""
        if argument is None:
            if "index" not in options:
                raise ConfigError("mixer 'layer' needs an index: layer:<i> (0 = embeddings, -1 = last)")
            return options
        try:
            index = int(argument)
        except ValueError:
            raise ConfigError(
                f"layer index in {spec!r} must be an integer, e.g. layer:3 or layer:-2"
            ) from None
        if "index" in options and options["index"] != index:
            raise ConfigError(f"{spec!r} conflicts with index={options['index']!r}")
        return {**options, "index": index}

    @classmethod
    def sweep_specs(cls, n_states: int) -> list[str]:
        """Every state but the last (``layer:0`` ... ``layer:<S-2>``): the last one is ``last``'s."""
        return [f"layer:{i}" for i in range(n_states - 1)]

    def commutes_with_token_mean(self) -> bool:
        """True: selecting a state is the same linear map at every token."""
        return True

    @property
    def resolved_index(self) -> int:
        """The index counted from 0 (embeddings)."""
        return self.index % self.n_states

    @property
    def spec(self) -> str:
        """``layer:<i>`` with this mixer's index as given (negative stays negative)."""
        return f"layer:{self.index}"

    def _mix(self, states: Tensor, mask: Tensor, standardize: tuple[Tensor, Tensor] | None = None,
             scales: Tensor | None = None) -> MixOutput:
        i = self.resolved_index
        # Only the state read is widened (and dequantised, and standardised): the others never need it.
        state = states[:, :, i]  # (B, T, D) stored precision
        if scales is not None:
            state = dequantized(state, scales[:, :, i], torch.float32)  # (B, T, D)
        if standardize is None:
            mixed = state.to(self.compute_dtype)  # (B, T, D)
        else:
            shift, scale = standardize
            mixed = standardized(state, shift[i], scale[i]).to(self.compute_dtype)  # (B, T, D)
        return MixOutput(mixed=mixed, aux_loss=mixed.new_zeros(()))

    def layer_weights(self) -> np.ndarray:
        """One-hot on the selected state."""
        w = np.zeros(self.n_states)
        w[self.resolved_index] = 1.0
        return w


class LastLayer(SelectLayer):
    """The last cached state: the baseline every layer-mixing method is compared with."""

    name: ClassVar[str] = "last"
    spec_argument: ClassVar[str | None] = None
    pooled_form: ClassVar[str | None] = "last"

    def __init__(self, n_states: int, dim: int) -> None:
        super().__init__(n_states, dim, index=-1)

    @classmethod
    def spec_options(cls, spec: str, argument: str | None, options: dict) -> dict:
        """The options as given: ``last`` takes no argument and no index."""
        return options

    @classmethod
    def sweep_specs(cls, n_states: int) -> list[str]:
        """``last``."""
        return ["last"]

    @property
    def spec(self) -> str:
        """``last``."""
        return "last"


# Registered here rather than by decorator so that the baseline, ``last``, leads the list of mixers.
register_mixer(LastLayer)
register_mixer(SelectLayer)
