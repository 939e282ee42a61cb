"""A head's settings, each declared once: :class:`~layercache.heads.LayerHead`'s keywords, their defaults, the rules
their values follow, and how ``train-head`` and ``sweep`` type them.

:class:`HeadOptions` is the one declaration (:mod:`layercache.core.option_specs`): ``LayerHead``'s signature takes its
defaults from it (scikit-learn reads an estimator's parameters from its ``__init__``, so they stay spelled out there,
and ``tests/cli/test_spec_options.py`` holds the two to the same names, order and defaults); ``LayerHead.fit`` checks
the values against the fields' constraints before it reads the cache; the command line's options are made from the
flags. What each setting does is documented on :class:`~layercache.heads.LayerHead`.

This module imports no torch: ``--help`` reads it, with the lists its options accept (:data:`NORMALIZATIONS`,
:data:`SCHEDULES`, :data:`SOLVERS`), declared here and imported by the modules that run them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.devices import DEFAULT_DEVICE, DEVICE_FLAG
from ..core.layers import LayerSpec
from ..core.option_specs import Flag, at_least, fraction, option_field, option_spec, positive

DEFAULT_MIXER = "adaptive"
"""The mixer of a head when none is named: ``LayerHead``, ``train_head`` and ``train-head --mixer``."""
TRAIN_SPLIT = "train"
"""The split a head (and a sweep) trains on unless told otherwise: ``train_head``, ``sweep``, ``--train-split``."""

NORMALIZATIONS = ("auto", "none", "standardize", "layer_norm")
"""Every way the states are normalised before mixing (``normalize``, ``--normalize``), what each does in
:mod:`~layercache.heads.blocks.normalize`."""
SCHEDULES = ("linear", "cosine", "constant", "plateau")
"""Every learning-rate schedule after warmup (``schedule``, ``--schedule``), run by
:class:`~layercache.heads.training.trainer.TrainConfig`."""
SOLVERS: dict[str, str] = {
    "auto": "lbfgs when the model is a linear head on fixed features (last or layer:<i>), else adamw",
    "lbfgs": "full batch, the L2 strength C chosen on validation: L-BFGS (classification), ridge (regression)",
    "adamw": "minibatch AdamW with early stopping on the validation metric",
}
"""Every way to fit a head, by name (what ``--solver`` offers), with what it does
(:mod:`~layercache.heads.training.fitting` decides which one a model gets)."""


def solver_names() -> tuple[str, ...]:
    """The solvers' names, in registry order."""
    return tuple(SOLVERS)


METRIC_DEFAULT = ("accuracy (mcc when the train classes are imbalanced), span_f1 for IOB tags else macro_f1, "
                  "pearson for regression")
"""What selects the epoch without ``--metric`` (:func:`~layercache.heads.scoring.selection.requested_metrics`)."""

NORMALIZE_AFTER = ("standardize: per dimension with the train split's statistics; layer_norm: per token; auto: "
                   "standardize for pre-LN models such as GPT-2 and Llama, none for BERT-style.")
SOLVER_AFTER = ("lbfgs: full batch, the L2 strength C chosen on validation (a linear head on last or layer:<i>); "
                "adamw: minibatches with early stopping (any head); auto: lbfgs where it applies, else adamw.")


@option_spec
@dataclass(frozen=True)
class HeadOptions:
    """The keywords of :class:`~layercache.heads.LayerHead` after its mixer, in its order, with its defaults.

    ``LayerHead(mixer, **dataclasses.asdict(options))`` builds the head these options describe.
    """

    tasks: str | Sequence[str] | None = option_field(None, Flag(
        "--task", "Task(s) to learn jointly; repeatable.", reader="list", show_default="every task in the cache"))
    layers: Sequence[LayerSpec] | None = option_field(None, Flag(
        "--layers", "States to read: names or indices; comma-separated.", reader="layers",
        show_default="all"))
    source: str = option_field("auto", Flag(
        "--source", "What the head reads.", "auto: token states when the cache stores them."))
    mixer_options: Mapping[str, Any] | None = option_field(None, Flag(
        "--mixer-option", "Mixer setting KEY=VALUE, e.g. k=64, alpha=70, topk=3; repeatable.", reader="assignments"))
    head_options: Mapping[str, Any] | None = option_field(None, Flag(
        "--head-option", "Head setting KEY=VALUE, e.g. pooling=attention, attention_heads=8; repeatable.",
        reader="assignments"))
    share_mixer: bool = option_field(True, Flag(
        "--separate-mixers", "One mixer per task instead of one shared.", negated=True))
    loss_weights: Mapping[str, float] | None = option_field(None, Flag(
        "--loss-weight", "TASK=WEIGHT for joint training; repeatable.", reader="loss_weights"))
    normalize: str = option_field("auto", Flag("--normalize", "States before mixing.", NORMALIZE_AFTER))
    metric: str | Mapping[str, str] | None = option_field(None, Flag(
        "--metric", "Validation metric that selects the epoch and stops early.",
        "NAME for every task, or TASK=NAME per task (repeatable); a joint head selects on the loss-weighted mean.",
        reader="metric", show_default=METRIC_DEFAULT))
    class_weight: str | Mapping[str, Any] | None = option_field(None, Flag(
        "--class-weight", "Class weights in the classification loss: balanced (n_samples / (n_classes * count), as "
                          "scikit-learn) or CLASS=WEIGHT pairs, e.g. neg=2,pos=1 (classes by name or index); "
                          "TASK:... for one task of several, repeatable.", reader="class_weight",
        show_default="unweighted"))
    solver: str = option_field("auto", Flag("--solver", "How the head's weights are fitted.", SOLVER_AFTER))
    C_grid: Sequence[float] | None = option_field(None)
    epochs: int = option_field(20, Flag("--epochs", "Most epochs (early stopping may end sooner)."),
                               check=at_least(1, whole=True))
    batch_size: int = option_field(32, Flag("--batch-size", "Examples per minibatch."),
                                 check=at_least(1, whole=True))
    lr: float | None = option_field(None, Flag("--lr", "Peak learning rate.",
                                               show_default="the mixer's and head's default"),
                                    check=positive(optional=True))
    weight_decay: float = option_field(0.01, Flag(
        "--weight-decay", "AdamW weight decay (never on layer weights)."), check=at_least(0))
    schedule: str = option_field("linear", Flag("--schedule", "Learning-rate schedule after warmup."))
    warmup: float = option_field(0.06, check=fraction())
    patience: int = option_field(3, Flag(
        "--patience", "Epochs without validation gain before stopping (0 = never)."), check=at_least(0, whole=True))
    max_grad_norm: float | None = option_field(1.0, check=positive(optional=True))
    seed: int = option_field(0, Flag(
        "--seed", "Seed for initialisation, order, dropout and the validation slice."))
    seeds: int = option_field(1, Flag(
        "--seeds", "Train N heads (seeds SEED to SEED+N-1) on one validation slice and predict with their averaged "
                   "probabilities: steadier and usually better than one seed, N times the training."))
    val_fraction: float = option_field(0.1, check=fraction(open_low=True))
    val_seed: int | None = option_field(None)
    device: str = option_field(DEFAULT_DEVICE, DEVICE_FLAG)
    progress: bool = option_field(True)
