"""What a comparison computes, each option declared once for :func:`~.comparing.compare_caches` and for
``layercache compare`` (a field and its :class:`~layercache.core.option_specs.Flag`).

The options it shares with the probe report (``tasks``, ``eval_split``, ``cumulative``, ``seed``, ``max_train``)
are spelled as the report spells them, so a message names the same flag for both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...core.holdout import DEFAULT_MAX_TRAIN, check_max_train
from ...core.option_names import option
from ...core.option_specs import (
    Constraint,
    Flag,
    at_least,
    check_options,
    field_default,
    option_field,
    option_spec,
    spec_fields,
    spec_from_keywords,
)
from ...errors import ConfigError

CKA_STATES = ("auto", "mean", "words")
"""What cross-model CKA compares: ``mean``: one vector per example (the cache's mean-pooled vector, or the mean of
its token states); ``words``: the state of each word's first sub-token (every cache must hold token states);
``auto``: ``mean``."""
CKA_ESTIMATORS = ("debiased", "plain")
"""How cross-model CKA is estimated: ``debiased`` (the unbiased HSIC of Song et al. 2012, as Nguyen et al. 2021) or
``plain`` (Kornblith et al. 2019). Debiased is the default: the plain estimator reads high when the examples are
few for a state's width (two independent random states of width 384 read about 0.65 on 200 examples, 0.16 on the
default 2,000), by an amount that depends on both, so pairs of other widths or sample sizes would not compare; the
debiased one reads near 0 for unrelated states at any size and 1 for the same states. ``plain`` gives the
estimator of most published CKA numbers (and :func:`~layercache.depth.linear_cka`'s)."""
DEFAULT_CKA_EXAMPLES = 2000
"""Examples (words, for ``words``) in the seeded sample every pair's CKA is computed on."""


@option_spec
@dataclass(frozen=True)
class CompareOptions:
    """The comparison's options (see :func:`~.comparing.compare_caches` for what each does)."""

    tasks: Sequence[str] | None = option_field(None, Flag(
        "--task", "Task(s) to compare; repeatable.", reader="list", show_default="every task all the caches hold"))
    """The tasks to compare (default: every task all the caches hold that they can all probe)."""
    eval_split: str | None = option_field(None, Flag(
        "--eval-split", "Split the scores and the CKA are on.",
        show_default="test when present, else the validation split"))
    """The split scores and CKA are on (default: the test split when there is one, else the validation split)."""
    names: Sequence[str] | None = option_field(None, Flag(
        "--name", "A name for each cache, in their order (repeatable).", reader="list",
        show_default="the model's, with its storage where two would read alike"))
    """How tables and figures name each cache, one per cache (default: its model, with its storage or folder
    where two would read alike)."""
    cumulative: bool = option_field(True, Flag(
        "--cumulative/--no-cumulative", "Cumulative scoring: a probe on the mix of layers 0..l for every l."))
    """Fit the cumulative probes, whose gains give each model's expected layer (E_Delta, Tenney et al.)."""
    cka_states: str = option_field("auto", Flag(
        "--cka-states", "What CKA compares: mean (a vector per example: the pooled mean, else the mean of its "
                        "token states), words (each word's first sub-token) or auto (mean)."),
        check=Constraint(lambda v: v in CKA_STATES, f"must be one of {', '.join(CKA_STATES)}"))
    """``mean``, ``words`` or ``auto`` (:data:`CKA_STATES`)."""
    cka_estimator: str = option_field("debiased", Flag(
        "--cka-estimator", "How CKA is estimated: debiased (unbiased HSIC; unrelated states read near 0 at any "
                           "sample size) or plain (Kornblith et al.; biased upward for few examples)."),
        check=Constraint(lambda v: v in CKA_ESTIMATORS, f"must be one of {', '.join(CKA_ESTIMATORS)}"))
    """``debiased`` or ``plain`` (:data:`CKA_ESTIMATORS`; why debiased is the default there)."""
    cka_examples: int = option_field(DEFAULT_CKA_EXAMPLES, Flag(
        "--cka-examples", "Examples (words) in the seeded sample CKA is computed on."),
        check=at_least(2, whole=True))
    """The size of the seeded sample of examples (words) every pair's CKA is on (the split's, if smaller)."""
    seed: int = option_field(0, Flag("--seed", "Seed for validation slices, control tasks and samples."))
    max_train: int | None = option_field(DEFAULT_MAX_TRAIN, Flag(
        "--max-train", "Fit each task's probes on a seeded sample of at most N training examples (words); 0 or all: "
                       "every one.", reader="max_train", typed_default=str(DEFAULT_MAX_TRAIN)))
    """Fit every probe of a task on at most this many training examples (words) per model; None: every one."""


def compare_options(given: CompareOptions | None, keywords: Mapping[str, Any]) -> CompareOptions:
    """``given``, or the options of :func:`~.comparing.compare_caches`'s flat ``keywords``, checked against their
    rules (a keyword it does not take is a TypeError, as in any call; one beside ``given`` is refused)."""
    names = {f.name for f in spec_fields(CompareOptions)}
    unknown = sorted(set(keywords) - names)
    if unknown:
        raise TypeError(f"compare_caches() got an unexpected keyword argument {unknown[0]!r}")
    flat = {f.name: keywords.get(f.name, field_default(f)) for f in spec_fields(CompareOptions)}
    options: CompareOptions = spec_from_keywords(CompareOptions, given, flat, "options")
    check_options(CompareOptions, {f.name: getattr(options, f.name) for f in spec_fields(CompareOptions)})
    check_max_train(options.max_train)
    if options.cka_estimator == "debiased" and options.cka_examples < 4:  # its unbiased HSIC divides by n - 3
        raise ConfigError(f"Debiased CKA needs at least 4 examples, and {option('cka_examples', options.cka_examples)} "
                          f"asks for {options.cka_examples}; ask for 4 or more, or "
                          f"{option('cka_estimator', 'plain')}.")
    return options
