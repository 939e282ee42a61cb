"""Refusing numbers that are not finite: NaN or inf in a cache's states or labels, or a diverged head.

A NaN in the states turns the loss into NaN, and a head trained on it learns nothing and reports
garbage. Checking every value of every batch would cost one more pass over the states the feed
just read (the training step is memory-bound), so the checks are placed where they are cheap:

- the trainer reads the loss as a Python float every step anyway; :func:`math.isfinite` on it is
  the whole per-step cost;
- evaluation checks each batch's outputs (a few numbers per example, not ``T·S·D``);
- only when one of those is not finite are the batch's states and labels scanned
  (:func:`non_finite_input`), to name the split, row and state at fault; when the batch is clean,
  the whole training split is scanned once (a NaN the loss ignored may have poisoned the weights
  through its gradient). When everything is finite, the head itself diverged
  (:class:`DivergedError`).

:func:`check_split_stats` refuses early when the manifest's per-state statistics of a split are
already not finite (extraction recorded a NaN or inf in them), and :func:`split_state_stats` a split
whose per-dimension statistics (what standardises a head's input) are.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ...core.option_names import option
from ...errors import ConfigError, NonFiniteStatesError


def reextract() -> str:
    """What fixes a cache whose states are not finite, naming its options as the reader passes them."""
    return (f"re-extract the cache with {option('overwrite', True)} (and {option('storage_dtype', 'bfloat16')} if "
            "the model's states overflow float16)")


class DivergedError(ConfigError):
    """Training produced a non-finite loss or outputs from finite inputs: the optimisation diverged."""


class NonFiniteOutputsError(ConfigError):
    """A trained head gives non-finite outputs for finite states: its weights are damaged or diverged."""


def _kind(values: torch.Tensor | np.ndarray) -> str:
    """``NaN`` or ``inf`` for the first non-finite value among ``values``."""
    values = torch.as_tensor(values)
    return "NaN" if bool(torch.isnan(values).any()) else "inf"


def _where(feed, row: int) -> str:
    """``split 'train', row 17 (source row 203)``: the cache row and, when known, the dataset row."""
    text = f"split {getattr(feed, 'split', '?')!r}, row {row}"
    cache = getattr(feed, "cache", None)
    if cache is not None:
        try:
            text += f" (source row {int(cache.example_index(feed.split)[row])})"
        except Exception:  # only a nicety for the message; the row itself is already named
            pass
    return text


def non_finite_input(feed, batch) -> NonFiniteStatesError | None:
    """The error naming the first non-finite state value or regression label of ``batch``, if any.

    ``batch.states`` is ``(B, T, S, D)`` (``T = 1`` for pooled vectors) and ``batch.mask`` ``(B, T)``;
    padded positions repeat a real token, so only real positions are looked at. Among several
    bad values the lowest split row, then the first state, is named.
    """
    states, mask = batch.states_on(), batch.mask  # int8: dequantised, so a non-finite scale shows
    bad = ~torch.isfinite(states).all(dim=-1)  # (B, T, S)
    bad &= mask.to(bad.device).unsqueeze(-1)
    names = getattr(feed, "layer_names", None)
    if bool(bad.any()):
        b, t, s = bad.nonzero().unbind(1)  # (k,) each
        rows = np.asarray(batch.rows)[b.cpu().numpy()]
        first = int(np.lexsort((s.cpu().numpy(), rows))[0])
        bi, ti, si = int(b[first]), int(t[first]), int(s[first])
        state = names[si] if names is not None else f"state {si}"
        return NonFiniteStatesError(
            f"The cache's states are not finite at {_where(feed, int(rows[first]))}, {state} "
            f"({_kind(states[bi, ti, si])}); {reextract()}.")
    kinds = getattr(feed, "kinds", {})
    for task, labels in batch.labels.items():
        if kinds.get(task) != "regression":
            continue
        bad_rows = ~torch.isfinite(labels)  # (B,)
        if bool(bad_rows.any()):
            i = int(np.argmin(np.where(bad_rows.cpu().numpy(), np.asarray(batch.rows), np.iinfo(np.int64).max)))
            return NonFiniteStatesError(
                f"The cache's labels of task {task!r} are not finite at {_where(feed, int(batch.rows[i]))} "
                f"({_kind(labels[i])}); fix that value in the dataset and re-extract the cache.")
    return None


def first_non_finite_input(feed) -> NonFiniteStatesError | None:
    """Scan every batch of ``feed`` (one unshuffled pass) for a non-finite state or label.

    Used only once something already went wrong: a NaN state at a position the loss ignores (a
    special token of a token task) still sends NaN gradients into the weights, and the loss turns
    non-finite only at a later batch, whose own states are fine.
    """
    for batch in feed.epoch(shuffle=False):
        error = non_finite_input(feed, batch)
        if error is not None:
            return error
    return None


def check_loss(value: float, feed, batch, *, epoch: int, step: int, lr: float) -> None:
    """Raise when the training loss ``value`` is not finite: bad input named, or divergence."""
    if math.isfinite(value):
        return
    error = non_finite_input(feed, batch) or first_non_finite_input(feed)
    if error is not None:
        raise error
    raise DivergedError(f"Training diverged at epoch {epoch}, step {step}: the loss became {value} on finite "
                        f"states; lower {option('lr')} (it was {lr:g}).")


def check_outputs(outputs: dict[str, torch.Tensor], feed, batch) -> None:
    """Raise when a head's outputs for ``batch`` are not finite, naming the input at fault if any.

    ``outputs``: task -> ``(B, C)``, ``(B, 1)`` or ``(B, T, C)``. For token outputs only real
    positions count (padding may hold anything a mask let through).
    """
    for task, out in outputs.items():
        finite = torch.isfinite(out)
        if out.dim() == 3:
            finite = finite | ~batch.mask.to(out.device).unsqueeze(-1)
        if bool(finite.all()):
            continue
        error = non_finite_input(feed, batch)
        if error is not None:
            raise error
        raise NonFiniteOutputsError(
            f"The head's outputs for task {task!r} are not finite on finite states of split "
            f"{getattr(feed, 'split', '?')!r}: its weights are damaged or its training diverged; retrain it "
            f"with a lower {option('lr')}.")


def check_split_stats(cache, split: str, layer_names: list[str]) -> None:
    """Refuse a split whose recorded per-state mean, std or rms (manifest) is not finite."""
    stats = cache.manifest.splits[split].stats or {}
    for name in layer_names:
        for key, value in (stats.get(name) or {}).items():
            try:
                finite = math.isfinite(float(value))
            except (TypeError, ValueError):
                continue  # not a number: not this check's business
            if not finite:
                raise NonFiniteStatesError(
                    f"The cache's states are not finite in split {split!r}, {name} (its recorded {key} is "
                    f"{value}); {reextract()}.")


def split_state_stats(cache, split: str, index: list[int], layer_names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(mean, std), each ``(S, D)``: the per-dimension statistics of the states ``index`` (named ``layer_names``)
    over every real token of ``split``, exact, from the shards' sums (no pass over the states), which standardise
    a head's input; refused when they are not finite (damaged sums would turn every state into NaN)."""
    stats = cache.layer_stats(split)
    mean, std = stats["mean"][index], stats["std"][index]  # (S, D) each
    bad = np.nonzero(~(np.isfinite(mean) & np.isfinite(std)).all(axis=1))[0]
    if len(bad):
        raise unstandardisable(split, layer_names[bad[0]])
    return mean, std


def unstandardisable(split: str, state: str) -> NonFiniteStatesError:
    """The refusal of a split whose per-dimension statistics (the shards' sums) are not finite for ``state``."""
    return NonFiniteStatesError(
        f"The cache's per-dimension statistics of split {split!r} are not finite for state {state}, so its states "
        f"cannot be standardised; {reextract()}, or pass {option('normalize', 'none')}.")
