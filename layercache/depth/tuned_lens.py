"""The tuned lens (Belrose et al. 2023) and the linear shortcut (Din et al. 2023), learned from a decoder cache.

Both read a layer's state ``h_l`` through an affine translator before the model's own final norm and unembedding
(``lens.safetensors`` in the cache): ``logits_l = W_U · norm(h_l + A_l h_l + b_l)``. The translators start as the
identity map (``A = 0``, ``b = 0``: the logit lens), and are fitted with no model loaded:

- ``objective="kl"``, the tuned lens: each translator minimises ``KL(p_L || p_l)`` over a split's tokens, ``p_L`` the
  model's own next-token distribution (the cache's ``layer_L`` through the same head), by Adam on minibatches of
  tokens. The work is the logits' matmuls: tokens x layers x width x vocabulary, once forward and once backward.
- ``objective="least_squares"``, the linear shortcut: each translator is the least-squares map from ``h_l`` to the
  cached ``h_L`` (with a bias and a small ridge), in closed form from one pass; its output is read as ``h_L`` is
  (after the final norm when the cache stores ``layer_L`` so).

The last state needs no translator (its lens is the model's output). Scores per layer on a held-out split, for the
logit lens and the fitted lens side by side: :meth:`TunedLens.score` and :mod:`.lens_scores`. A lens saves to a
folder (``save_pretrained``: ``lens.safetensors`` and ``config.json``, no pickle) that records the cache's model, and
scores only caches of that model.

    lens = TunedLens().fit(cache, "train")
    scores = lens.score(cache, "validation")     # {"logit": LensScores, "tuned": LensScores}
    scores["tuned"].kl                           # (S,) nats per token, below the logit lens's
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from sklearn.base import BaseEstimator

from ..core.devices import resolve_device
from ..core.files import write_file_atomic, write_text_atomic
from ..core.layers import LayerSpec
from ..core.memory import current_budget
from ..core.option_names import option
from ..core.option_specs import check_options
from ..core.threads import computes
from ..core.version import __version__
from ..errors import ConfigError
from ..progress import training_progress
from ..store.reader import LayerCache
from .lens_options import LensOptions
from .lens_scores import DEFAULT_CHUNK_BYTES, LensMap, LensScores, lens_logits, on_device, score_lenses
from .lens_tokens import LOGIT_BUFFERS, LensInputs, checked_rows, lens_inputs, token_blocks

LENS_NAMES = {"kl": "tuned", "least_squares": "linear"}
"""The name each objective's lens has in scores and reports."""
CONFIG_FILE, TENSORS_FILE = "config.json", "lens.safetensors"
Rows = Sequence[int] | np.ndarray | None
"""Cache rows of a split (None: all, or a lens's own sample)."""
_D = LensOptions()  # the settings as left out: their types, defaults and rules are declared there


@dataclass(frozen=True)
class LensIdentity:
    """What a fitted lens records of its cache, and checks of any cache it scores: the same model's states."""

    model: str
    fingerprint: str
    hidden_size: int
    n_layers: int
    layer_names: tuple[str, ...]
    """The states the lens translates, then ``layer_L``."""

    @classmethod
    def of(cls, cache: LayerCache, layer_names: list[str]) -> LensIdentity:
        """The identity of ``cache``'s model, for a lens reading ``layer_names``."""
        model = cache.manifest.model
        return cls(model.name, model.fingerprint, model.hidden_size, model.n_layers, tuple(layer_names))


class TunedLens(BaseEstimator):
    """Affine translators per layer of a decoder, fitted from its cache (see the module).

    Args:
        layers: the kept states to translate (names or indices; default all but ``layer_L``, which is read as it is).
        objective: ``kl`` (the tuned lens) or ``least_squares`` (the linear shortcut).
        epochs: passes over the training tokens (``kl``).
        lr: Adam's learning rate (``kl``).
        batch_tokens: tokens per minibatch (``kl``).
        max_tokens: train on a seeded sample of examples with at most about this many tokens (None: every one).
        ridge: the least-squares fit's L2 strength, relative to the mean squared state (``least_squares``).
        seed: the sample, the minibatches' order and the initialisation's.
        device: ``auto``, ``cpu`` or ``cuda[:N]``: where the translators are fitted and the lenses scored.
        logits_dtype: the logits' matmul in ``float32`` or ``bfloat16`` (fit and scores; the softmax and the KL sum
            in float32: see :data:`~.lens_options.LOGITS_DTYPES`).
        progress: show a progress bar.
    """

    # scikit-learn reads the parameters from __init__: LensOptions' fields, in order (a test holds them equal)
    def __init__(self, layers: LayerSpec | Sequence[LayerSpec] | None = _D.layers, *, objective: str = _D.objective,
                 epochs: int = _D.epochs, lr: float = _D.lr, batch_tokens: int = _D.batch_tokens,
                 max_tokens: int | None = _D.max_tokens, ridge: float = _D.ridge, seed: int = _D.seed,
                 device: str = _D.device, logits_dtype: str = _D.logits_dtype, progress: bool = _D.progress) -> None:
        self.layers = layers
        self.objective = objective
        self.epochs = epochs
        self.lr = lr
        self.batch_tokens = batch_tokens
        self.max_tokens = max_tokens
        self.ridge = ridge
        self.seed = seed
        self.device = device
        self.logits_dtype = logits_dtype
        self.progress = progress

    # --- fitting ------------------------------------------------------------------------
    @computes
    def fit(self, cache: LayerCache, split: str = "train", *, rows: Rows = None) -> TunedLens:
        """Fit a translator for every state asked for but ``layer_L`` on the tokens of ``split`` (``rows``: cache
        rows, default a sample of ``max_tokens``, else all)."""
        check_options(LensOptions, self.get_params())
        device = resolve_device(self.device)  # refused before the cache is read
        inputs = _tuned_inputs(cache, self.layers)
        split = str(cache.report_split(split, fallback=cache.splits[0]))
        rows = self._training_rows(cache, split, rows)
        translated = [p for p in inputs.positions if p != inputs.final_position]
        D = cache.manifest.model.hidden_size
        torch.manual_seed(self.seed)
        self.weight_ = torch.zeros(len(translated), D, D)  # (T, D, D): A_l, zero = the identity map
        self.bias_ = torch.zeros(len(translated), D)  # (T, D)
        self.positions_ = translated
        self.layer_names_ = [cache.layer_names[p] for p in translated]
        self.identity_ = LensIdentity.of(cache, [*self.layer_names_, cache.layer_names[inputs.final_position]])
        self.normed_output_ = self.objective == "least_squares" and inputs.lens.normed_last
        if translated:
            if self.objective == "kl":
                self.history_ = self._fit_kl(cache, split, rows, inputs, device)
            else:
                self._fit_least_squares(cache, split, rows, inputs)
        self.n_tokens_ = int(cache.lengths(split)[rows].sum())
        return self

    def _training_rows(self, cache: LayerCache, split: str, rows: Rows) -> np.ndarray:
        """The rows fitted on: ``rows``, or a seeded sample of about ``max_tokens`` tokens, or all."""
        if rows is not None or self.max_tokens is None:
            return checked_rows(cache, split, rows)
        order = np.random.default_rng(self.seed).permutation(cache.num_examples(split))  # (n,)
        within = np.cumsum(cache.lengths(split)[order]) <= self.max_tokens
        return np.sort(order[:max(1, int(within.sum()))])

    def _fit_kl(self, cache: LayerCache, split: str, rows: np.ndarray, inputs: LensInputs,
                device: torch.device) -> list[float]:
        """Adam on each translator's ``KL(p_L || p_l)``; returns each epoch's mean loss (summed over the layers)."""
        lens = on_device(inputs.lens, device, self.logits_dtype)
        weight = self.weight_.to(device).requires_grad_()
        bias = self.bias_.to(device).requires_grad_()
        optimizer = torch.optim.Adam([weight, bias], lr=self.lr)
        rng = np.random.default_rng(self.seed)
        chunk = _chunk_bytes(lens.vocab_size, self.batch_tokens)
        steps = math.ceil(int(cache.lengths(split)[rows].sum()) / self.batch_tokens)
        final_at = inputs.at(inputs.final_position)
        history = []
        with training_progress(self.progress, epochs=self.epochs, total=steps * self.epochs) as bar:
            for epoch in range(1, self.epochs + 1):
                bar.epoch(epoch)
                total, count = 0.0, 0
                for block, _ in token_blocks(cache, split, rng.permutation(rows), inputs.read, chunk_bytes=chunk,
                                             block_tokens=self.batch_tokens):  # (b, R, D)
                    block = block.to(device)
                    with torch.no_grad():  # the model's own distribution p_L, once for every layer
                        final_logp = F.log_softmax(lens_logits(block[:, final_at], lens, normed=lens.normed_last,
                                                               logits_dtype=self.logits_dtype), -1)  # (b, V)
                        final_p = final_logp.exp()  # (b, V)
                        final_sum = float(torch.special.xlogy(final_p, final_p).sum())  # sum of p log p
                    optimizer.zero_grad(set_to_none=True)
                    loss_sum = 0.0
                    for t, p in enumerate(self.positions_):  # one graph per layer: the logits of one are alive
                        h = block[:, inputs.at(p)]  # (b, D)
                        logits = lens_logits(_affine(h, weight[t], bias[t]), lens,
                                             logits_dtype=self.logits_dtype)  # (b, V) float32
                        loss_sum += _kl_backward(logits, final_p, final_sum)
                    optimizer.step()
                    total, count = total + loss_sum * len(block), count + len(block)
                    bar.step(loss_sum)
                history.append(total / max(count, 1))
        self.weight_, self.bias_ = weight.detach().cpu(), bias.detach().cpu()
        return history

    def _fit_least_squares(self, cache: LayerCache, split: str, rows: np.ndarray, inputs: LensInputs) -> None:
        """Each translator in closed form: ``[h_l, 1] @ M = h_L`` by ridge least squares, from sums over one pass."""
        D = cache.manifest.model.hidden_size
        T = len(self.positions_)
        gram = np.zeros((T, D + 1, D + 1))  # (T, D+1, D+1) sum of [h,1]^T [h,1]
        cross = np.zeros((T, D + 1, D))  # (T, D+1, D) sum of [h,1]^T h_L
        final_at = inputs.at(inputs.final_position)
        for block, _ in token_blocks(cache, split, rows, inputs.read, chunk_bytes=_chunk_bytes(1, 4096),
                                     block_tokens=4096):  # (b, R, D)
            y = block[:, final_at].double().numpy()  # (b, D)
            for t, p in enumerate(self.positions_):
                x = np.concatenate([block[:, inputs.at(p)].double().numpy(), np.ones((len(block), 1))], 1)  # (b, D+1)
                gram[t] += x.T @ x
                cross[t] += x.T @ y
        for t in range(T):
            scale = np.trace(gram[t][:D, :D]) / D  # the mean squared state, times the tokens
            penalty = np.diag(np.r_[np.full(D, self.ridge * scale), 0.0])  # no penalty on the bias
            solution = np.linalg.solve(gram[t] + penalty, cross[t])  # (D+1, D)
            self.weight_[t] = torch.from_numpy((solution[:D] - np.eye(D)).T).float()  # A = M^T - I
            self.bias_[t] = torch.from_numpy(solution[D]).float()

    # --- using it -------------------------------------------------------------------------
    def check_fitted(self) -> None:
        """Refuse a lens that is not fitted."""
        if not hasattr(self, "weight_"):
            raise ConfigError("This lens is not fitted yet; call fit(cache) or TunedLens.from_pretrained(path) first.")

    def translate(self, position: int, states: torch.Tensor) -> torch.Tensor:
        """States ``(n, D)`` of kept state ``position`` through its translator: ``h + A h + b``."""
        t = self.positions_.index(position)
        return _affine(states, self.weight_[t].to(states.device), self.bias_[t].to(states.device))

    def check_cache(self, cache: LayerCache) -> None:
        """Refuse a cache of another model, or one without the states this lens translates."""
        self.check_fitted()
        model = cache.manifest.model
        identity = self.identity_
        if (model.fingerprint, model.hidden_size, model.n_layers) != (identity.fingerprint, identity.hidden_size,
                                                                       identity.n_layers):
            raise ConfigError(f"This lens was fitted on states of {identity.model} and the cache {cache.path} holds "
                              f"{model.name}'s (another fingerprint); fit a lens on this cache.")
        missing = [n for n in identity.layer_names if n not in cache.layer_names]
        if missing:
            raise ConfigError(f"The cache {cache.path} does not keep {missing[0]}, which this lens reads; score it on "
                              "a cache that keeps every state the lens was fitted on.")

    def lens_map(self, device: torch.device | None = None) -> LensMap:
        """What this lens does to a state before the unembedding, for :func:`~.lens_scores.score_lenses`, with its
        translators on ``device`` (default the CPU): moved once, not once a block."""
        self.check_fitted()
        weight, bias = self.weight_.to(device), self.bias_.to(device)  # (T, D, D), (T, D)
        at = {p: t for t, p in enumerate(self.positions_)}
        return LensMap(lambda p, h: _affine(h, weight[at[p]], bias[at[p]]) if p in at else h, self.normed_output_)

    @computes
    def score(self, cache: LayerCache, split: str | None = None, *, rows: Rows = None,
              chunk_bytes: int | None = None) -> dict[str, LensScores]:
        """Scores of the logit lens and this lens per layer on ``split`` (default the validation split, else the
        first), read in one pass on this lens's ``device``, its logits' matmul in its ``logits_dtype``:
        ``{"logit": ..., "tuned" | "linear": ...}`` (:class:`~.lens_scores.LensScores`)."""
        return score_fitted(cache, split, [self], rows=rows, chunk_bytes=chunk_bytes)

    # --- saving -----------------------------------------------------------------------------
    def save_pretrained(self, path: str | os.PathLike[str]) -> Path:
        """Write ``lens.safetensors`` (the translators) and ``config.json`` (settings, the cache's model, the states
        translated) into the folder ``path``."""
        self.check_fitted()
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {"weight": self.weight_.contiguous(), "bias": self.bias_.contiguous()}
        write_file_atomic(folder / TENSORS_FILE, lambda tmp: save_file(tensors, str(tmp)))
        config = {"layercache_version": __version__, "params": self.get_params(), "positions": self.positions_,
                  "normed_output": self.normed_output_, "n_tokens": self.n_tokens_,
                  "identity": {**vars(self.identity_), "layer_names": list(self.identity_.layer_names)},
                  "history": getattr(self, "history_", None)}
        write_text_atomic(folder / CONFIG_FILE, json.dumps(config, indent=2) + "\n")
        return folder

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str]) -> TunedLens:
        """A lens written by :meth:`save_pretrained`: the same translators, scoring only caches of its model."""
        folder = Path(path)
        try:
            config = json.loads((folder / CONFIG_FILE).read_text())
            tensors = load_file(str(folder / TENSORS_FILE))
            lens = cls(**config["params"])
            lens.weight_, lens.bias_ = tensors["weight"].float(), tensors["bias"].float()
            lens.positions_ = [int(p) for p in config["positions"]]
            identity = config["identity"]
            lens.identity_ = LensIdentity(**{**identity, "layer_names": tuple(identity["layer_names"])})
            lens.layer_names_ = list(lens.identity_.layer_names[:-1])
            lens.normed_output_ = bool(config["normed_output"])
            lens.n_tokens_ = int(config["n_tokens"])
            if config.get("history") is not None:
                lens.history_ = list(config["history"])
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ConfigError(f"{folder} is not a lens written by TunedLens.save_pretrained ({err}); fit one and save "
                              "it there.") from None
        T, D = len(lens.positions_), lens.identity_.hidden_size
        if tuple(lens.weight_.shape) != (T, D, D) or tuple(lens.bias_.shape) != (T, D):
            raise ConfigError(f"{folder / TENSORS_FILE} holds translators of shape {tuple(lens.weight_.shape)}, not "
                              f"the {(T, D, D)} its config describes; fit the lens again.")
        return lens


@computes
def score_fitted(cache: LayerCache, split: str | None, lenses: list[TunedLens], *, rows: Rows = None,
                 chunk_bytes: int | None = None) -> dict[str, LensScores]:
    """The logit lens and every fitted lens of ``lenses`` (a tuned lens and a linear shortcut, say: named by their
    objective) scored per layer on ``split`` of ``cache`` in one pass, on the lenses' ``device`` with their
    ``logits_dtype`` (the defaults' with no lens: the logit lens alone); each lens is checked against the cache."""
    names = [LENS_NAMES[lens.objective] for lens in lenses]
    if len(set(names)) < len(names):
        raise ConfigError("Score lenses of different objectives together (one tuned, one linear); score two lenses "
                          "of one objective in two calls.")
    for lens in lenses:
        check_options(LensOptions, lens.get_params())
    settings = {(lens.device, lens.logits_dtype) for lens in lenses} or {(_D.device, _D.logits_dtype)}
    if len(settings) > 1:
        raise ConfigError("Score lenses of one device and logits dtype together (they are scored in one pass); give "
                          "each lens the same device and logits_dtype.")
    ((device_name, logits_dtype),) = settings
    device = resolve_device(device_name)
    for lens in lenses:
        lens.check_cache(cache)
    layers = sorted({name for lens in lenses for name in lens.identity_.layer_names}, key=cache.layer_names.index)
    # the logit lens alone reads a projected cache too (its states mapped back through the basis)
    inputs = _tuned_inputs(cache, layers) if lenses else lens_inputs(cache)
    split = str(cache.report_split(split, fallback=cache.splits[0]))
    chunk = chunk_bytes or min(DEFAULT_CHUNK_BYTES, max(1 << 20, current_budget() // 4))
    maps: dict[str, LensMap | None] = {"logit": None,
                                       **{n: lens.lens_map(device) for n, lens in zip(names, lenses)}}
    return score_lenses(cache, split, inputs, maps, rows=rows, chunk_bytes=chunk, device=device,
                        logits_dtype=logits_dtype)


def _tuned_inputs(cache: LayerCache, layers: LayerSpec | Sequence[LayerSpec] | None) -> LensInputs:
    """:func:`~.lens_tokens.lens_inputs` for a tuned lens, which also refuses a projected cache (its states lost the
    directions a translator would read)."""
    inputs = lens_inputs(cache, layers, analysis="The tuned lens")
    if cache.projection() is not None:
        raise ConfigError(f"The tuned lens reads the model's full states, and {cache.path} stores them projected to "
                          f"{cache.hidden_size} dimensions; fit it on a cache extracted without "
                          f"{option('project')}.")
    return inputs


def _kl_backward(logits: torch.Tensor, final_p: torch.Tensor, final_sum: float) -> float:
    """Backpropagate the batch mean of ``KL(p_L || softmax(logits))`` from the logits ``(b, V)`` (``final_p``: p_L,
    ``final_sum``: the sum of p_L log p_L) and return it.

    Its gradient in the logits is ``(softmax(logits) - p_L) / b``: written out, it takes three passes over the
    ``(b, V)`` logits where autograd's log-softmax and KL take about eight, and p_L's exponential is shared by every
    layer. ``KL = sum p log p - sum p * logits + sum logsumexp(logits)`` (each row of p sums to 1).
    """
    b = len(logits)
    with torch.no_grad():
        lse = torch.logsumexp(logits, -1, keepdim=True)  # (b, 1)
        loss = (final_sum - float((final_p * logits).sum()) + float(lse.sum())) / b
        grad = (logits - lse).exp_().sub_(final_p).div_(b)  # (b, V)
    logits.backward(grad)  # type: ignore[no-untyped-call]
    return loss


def _affine(states: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """A translator on states ``(n, D)``: ``h + A h + b`` (``weight`` A (D, D), ``bias`` b (D,))."""
    return states + states @ weight.T + bias


def _chunk_bytes(vocab_size: int, block_tokens: int) -> int:
    """Float32 bytes of states read at once: the memory budget's share, at least one block's logits' worth."""
    return max(LOGIT_BUFFERS * vocab_size * 4 * block_tokens, min(DEFAULT_CHUNK_BYTES, current_budget() // 4))
