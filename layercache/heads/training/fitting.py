"""How a head's weights are fitted: the registry of solvers, which one a model gets, the default learning rate of
minibatch training (:func:`default_lr`) and what a run records of a fit (:func:`fit_record`).

:data:`SOLVERS` is the one list (``LayerHead(solver=...)``, ``train-head --solver``):

- ``adamw``: minibatch AdamW with a learning-rate schedule and early stopping on the validation
  metric (:mod:`.trainer`). Fits any head.
- ``lbfgs``: the convex full-batch fit (:mod:`.convex`): L-BFGS for a classification head (a
  sequence or a token head), ridge in closed form for a regression head, with the L2 strength ``C``
  chosen on validation data. Only for a model that is a linear model on fixed features
  (:func:`convex_obstacle` is None).
- ``auto``: ``lbfgs`` whenever the model qualifies, else ``adamw``.

A linear head on a mixer that learns nothing (``last``, ``layer:<i>``) is a convex problem: one
optimum, which a full-batch solver reaches, where minibatch AdamW stopped early on a validation
slice lands somewhere near it, on a weak signal no better than chance. That holds for a token head
too: its output layer is one logistic regression over the words' first sub-tokens (CoNLL-2003 NER
on MiniLM's ``layer:3``, test entity F1: 0.718 by AdamW, 0.753 by this fit, 0.755 by the linear
probe of the same layer). Everything that learns a weight before the head's output layer (layer
weights, a projection, attention, a hidden layer, attention pooling, a token head's encoder layers)
makes the problem non-convex.
"""

from __future__ import annotations

from ...core.option_names import option
from ...errors import ConfigError
from ..head_options import SOLVERS as SOLVERS  # declared with the head's options (no torch there), as its names
from ..head_options import solver_names as solver_names
from ..network.attention import SelfAttention
from ..network.model import HeadModel
from ..network.tasks import SequenceHead, TokenHead
from .trainer import TrainHistory


def convex_obstacle(model: HeadModel) -> str | None:
    """Why ``model`` is not a linear model on fixed features, as a clause; None when it is one.

    The model qualifies when every mixer learns nothing (:meth:`~..mixers.LayerMixer.is_fixed_map`)
    and every head's output layer reads its mixer's states directly: a sequence classification or
    regression head on its pooled states (pooling ``mean``, ``first`` or ``last``; no self-attention,
    no hidden layer), or a token head on each token's state (``encoder_layers=0``, the default under
    ``last`` and ``layer:<i>``; its ``attention_heads`` and ``ff_dim`` then build nothing). The
    input normalisation never learns, so any is fine.
    """
    not_convex = "so the problem is not convex"
    for mixer in model.mixers.values():
        if not mixer.is_fixed_map():
            return f"the mixer {model.mixer_spec!r} learns layer weights, {not_convex}"
    for name, head in model.heads.items():
        if isinstance(head, TokenHead):
            if len(head.encoder):
                return (f"the head of task {name!r} has transformer encoder layers (encoder_layers="
                        f"{len(head.encoder)}), {not_convex}")
            continue
        if not isinstance(head, SequenceHead):
            return f"the head of task {name!r} ({type(head).__name__}) is not one the full-batch fit covers"
        if head.attention is not None:
            return f"the head of task {name!r} attends over tokens (attention_heads), {not_convex}"
        if head.hidden is not None:
            return f"the head of task {name!r} has a hidden layer (hidden={head.hidden.out_features}), {not_convex}"
        if head.score is not None:
            return f"the head option pooling={head.pooling} (task {name!r}) learns its pooling, {not_convex}"
    return None


def resolve_solver(requested: str, model: HeadModel) -> str:
    """``lbfgs`` or ``adamw`` for ``model``: ``auto`` resolved, ``lbfgs`` refused where it cannot apply."""
    if requested not in SOLVERS:
        raise ConfigError(f"Unknown solver {requested!r}; choose one of {', '.join(SOLVERS)}.")
    obstacle = convex_obstacle(model)
    if requested == "auto":
        return "adamw" if obstacle is not None else "lbfgs"
    if requested == "lbfgs" and obstacle is not None:
        raise ConfigError(f"{option('solver', 'lbfgs')} fits a linear head on fixed features, but {obstacle}; use "
                          f"{option('solver', 'adamw')} (or auto, which picks it).")
    return requested


def fit_record(history: TrainHistory) -> dict:
    """What a run's config keeps about how its weights were fitted: the solver, and the convex fit's ``C`` per task."""
    if history.solver != "lbfgs":
        return {"solver": history.solver}
    return {"solver": history.solver, "method": history.fit["method"], "C": history.fit["C"],
            "C_grid": history.fit["C_grid"]}


def default_lr(model: HeadModel) -> float:
    """1e-3 for heads with attention or encoder layers, or a mixer that prefers it; 1e-2 for linear ones."""
    deep = any(isinstance(m, SelfAttention) for m in model.modules())
    return 1e-3 if deep or any(m.prefers_low_lr for m in model.mixers.values()) else 1e-2
