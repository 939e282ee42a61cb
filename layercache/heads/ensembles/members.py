"""A head that predicts with the average of several fitted heads: seed ensembles and ensembles of any members.

Functions over fitted heads, which :class:`~..estimator.LayerHead` calls (this module imports no estimator:
what it needs of a head is the protocol :class:`EnsembleHead`): :func:`fit_seeds` is ``fit`` with
``seeds=M`` (one head per seed on one validation slice, then their average), :func:`seed_ensemble`
combines heads that differ only in their seed (``LayerHead.from_seeds``, as ``layercache sweep`` combines
its winner's seeds) and :func:`member_ensemble` any heads fitted on the same states
(``LayerHead.from_members``, as its ``--ensemble`` does). The average itself is
:class:`~.model.EnsembleModel`; validation passes are combined, not run again (:mod:`.passes`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from sklearn.base import clone

from ...core.option_names import option
from ...core.tasks import LabelTask
from ...errors import ConfigError
from ...store.feed_pool import FeedPool
from ...store.reader import LayerCache
from ..data.source import pooled_equivalent
from ..network.model import HeadModel
from ..scoring.evaluation import score as score_predictions
from ..training.class_weights import parse_class_weight
from .model import EnsembleHistory, EnsembleModel
from .passes import combine_passes


class EnsembleHead(Protocol):
    """What the ensembles need of a head (:class:`~..estimator.LayerHead` is one): its settings, its fitted
    attributes, and the validation feed and collapse check of its own fit."""

    seed: int
    seeds: int
    val_seed: int | None
    mixer: str
    class_weight: Any
    model_: Any
    tasks_: list[LabelTask]
    layer_names_: list[str]
    source_: str
    normalize_: str
    cache_info_: dict
    data_: dict
    fit_: dict
    selection_: Any
    history_: Any
    train_config_: Any
    warnings_: list[str]
    validation_pass_: Any
    validation_metrics_: dict

    def get_params(self, deep: bool = True) -> dict:
        """The head's settings (scikit-learn's)."""

    def set_params(self, **params) -> "EnsembleHead":
        """Change settings (scikit-learn's); returns the head."""

    def fit(self, cache: LayerCache, split: str = "train", val_split: str | None = None, *,
            feeds: FeedPool | None = None, deadline: float | None = None) -> "EnsembleHead":
        """Fit on ``cache``; returns the head."""

    def _check_fitted(self) -> None:
        """Refuse a head that is not fitted."""

    def _validation(self, cache: LayerCache, split: str, val_split: str | None, tasks: list[LabelTask],
                    layer_names: list[str], source: str, feeds: FeedPool | None) -> tuple:
        """(training rows, validation feed, its description), as the head's fit chose them."""

    def _collapse_warnings(self, tasks: list[LabelTask], val_feed, class_weight: dict, exact: bool) -> list[str]:
        """The collapse warnings of predictions on ``val_feed``."""


H = TypeVar("H", bound=EnsembleHead)


def fit_seeds(head: H, cache: LayerCache, split: str, val_split: str | None, feeds: FeedPool,
              deadline: float | None, checkpoints=None, fresh: bool = False) -> H:
    """Fit one head per seed on the same validation data, then make ``head`` their seed ensemble
    (:func:`seed_ensemble`): what ``head.fit`` does with ``seeds > 1``."""
    slice_seed = head.seed if head.val_seed is None else head.val_seed
    members = []
    for i in range(head.seeds):
        member = clone(head).set_params(seeds=1, seed=head.seed + i, val_seed=slice_seed)
        member.fit(cache, split, val_split, feeds=feeds, deadline=deadline, checkpoints=checkpoints, fresh=fresh)
        if member.fit_["solver"] == "lbfgs":
            raise ConfigError(f"The {head.mixer} head is fitted by the convex solver, which gives the same weights "
                              f"for every seed, so a seed ensemble adds nothing; leave out {option('seeds')}, or "
                              f"pass {option('solver', 'adamw')}.")
        members.append(member)
    fitted = seed_ensemble(type(head), members, cache, split, val_split, feeds=feeds)
    for name, value in vars(fitted).items():  # the fitted attributes only: fit() leaves the settings alone
        if name.endswith("_"):
            setattr(head, name, value)
    head.checkpoints_ = [c for m in members for c in getattr(m, "checkpoints_", [])]
    return head


def seed_ensemble(make: Callable[..., H], members: list[H], cache: LayerCache, split: str = "train",
                  val_split: str | None = None, *, feeds: FeedPool | None = None) -> H:
    """One head (built by ``make(**params)``) that predicts with the average of ``members``, heads that differ
    only in their seed: ``LayerHead.from_seeds``.

    ``members``: heads fitted on ``cache`` (``split``, ``val_split`` as their ``fit`` had them)
    with the same settings but the seed, all validated on the same data (a seed ensemble,
    :mod:`.model`). ``fit_["seeds"]`` lists the members' seeds; the head's settings
    are the first member's with ``seeds`` the number of members. See :func:`member_ensemble`.
    """
    if len(members) < 2:
        raise ConfigError(f"A seed ensemble needs at least 2 fitted heads, got {len(members)}.")
    for m in members:
        m._check_fitted()
    own = ("seed", "seeds", "val_seed", "progress")
    settings = {k: v for k, v in members[0].get_params().items() if k not in own}
    for i, m in enumerate(members[1:], start=1):
        if {k: v for k, v in m.get_params().items() if k not in own} != settings:
            raise ConfigError(f"Head {i} of the seed ensemble was trained with other settings than head 0; "
                              "combine heads that differ only in their seed (or use from_members).")
    if any(m.fit_["solver"] == "lbfgs" for m in members):
        raise ConfigError("A head fitted by the convex solver is the same for every seed; a seed ensemble of such "
                          "heads adds nothing.")
    seeds = [m.seed for m in members]
    head = member_ensemble(make, members, cache, split, val_split, feeds=feeds,
                           labels=[f"seed {s}" for s in seeds])
    head.set_params(**{**members[0].get_params(), "seeds": len(members)})
    head.history_.seeds = seeds
    head.fit_ = {**head.fit_, "seeds": seeds}
    head.data_["seeds"] = seeds
    return head


def member_ensemble(make: Callable[..., H], members: list[H], cache: LayerCache, split: str = "train",
                    val_split: str | None = None, *, feeds: FeedPool | None = None,
                    labels: list[str] | None = None) -> H:
    """One head (built by ``make(**params)``) that predicts with the average of ``members`` (an ensemble,
    :mod:`.model`): ``LayerHead.from_members``.

    ``members``: heads (any mixers, single heads or ensembles) fitted on ``cache`` for the same
    tasks from the same states, validated on the same data (``split`` and ``val_split`` as
    their ``fit`` had them). Their validation passes are combined (no pass is run again) and
    scored against the validation labels; the collapse check runs on the ensemble's predictions.
    Members that read different sources are combined on token states when each one reading
    pooled vectors gives identical results on token states (a linear mixer under a mean-pooling
    linear head). ``labels`` name the members (default: their mixers); ``fit_["members"]`` keeps
    them. The head's settings are the first member's, except ``mixer``, which describes them all.
    """
    if len(members) < 2:
        raise ConfigError(f"An ensemble needs at least 2 fitted heads, got {len(members)}.")
    for m in members:
        m._check_fitted()
    first = members[0]
    for i, m in enumerate(members[1:], start=1):
        if ([t.to_json() for t in m.tasks_] != [t.to_json() for t in first.tasks_]
                or (m.layer_names_, m.data_.get("validation"), m.cache_info_)
                != (first.layer_names_, first.data_.get("validation"), first.cache_info_)):
            raise ConfigError(f"Head {i} of the ensemble predicts other tasks, reads other states or was validated "
                              "on other data than head 0; combine heads fitted on one cache alike.")
    source = _common_source(members, cache)
    labels = list(labels) if labels is not None else [m.model_.mixer_spec for m in members]
    tasks = first.tasks_
    model = EnsembleModel([m.model_ for m in members]).eval()
    head = make(**{**first.get_params(), "mixer": model.mixer_spec})
    head.model_ = model
    _, val_feed, val_desc = first._validation(cache, split, val_split, tasks, first.layer_names_, source, feeds)
    if val_desc != first.data_.get("validation"):
        raise ConfigError(f"The heads were validated on {first.data_.get('validation')}, not on {val_desc}; pass "
                          "the split and validation split they were fitted with.")
    head.validation_pass_ = combine_passes([m.validation_pass_ for m in members], tasks)
    head.validation_metrics_ = {t.name: score_predictions(t, val_feed.gold(t.name),
                                                          head.validation_pass_.predictions[t.name])
                                for t in tasks}
    head.selection_ = first.selection_
    head.warnings_ = head._collapse_warnings(tasks, val_feed, parse_class_weight(first.class_weight, tasks),
                                             exact=False)
    head.history_ = EnsembleHistory([m.history_ for m in members], labels)
    solvers = sorted({m.fit_["solver"] for m in members})
    head.fit_ = {"solver": solvers[0] if len(solvers) == 1 else "+".join(solvers), "members": labels,
                 "combine": "mean of class probabilities (per word for token tasks; regression: of predictions)"}
    head.train_config_ = first.train_config_
    head.tasks_, head.layer_names_, head.source_ = list(tasks), list(first.layer_names_), source
    head.normalize_, head.cache_info_ = first.normalize_, first.cache_info_
    head.data_ = {**first.data_, "members": labels}
    return head


def _common_source(members: list[EnsembleHead], cache: LayerCache) -> str:
    """The source every member of an ensemble can read: theirs when they share one, else token states
    when every member on pooled vectors gives identical results on them (:func:`~..data.source.pooled_equivalent`)."""
    sources = list(dict.fromkeys(m.source_ for m in members))
    if len(sources) == 1:
        return sources[0]
    odd = [m for m in members if m.source_ != "tokens" and not _same_on_tokens(m.model_)]
    if odd or not cache.stores_tokens:
        raise ConfigError(f"The heads read different data ({', '.join(sources)}) and not all of them can read token "
                          "states instead; combine heads that read the same source.")
    return "tokens"


def _same_on_tokens(model: HeadModel | EnsembleModel) -> bool:
    """Whether a model fitted on pooled vectors gives the same outputs on token states (every member of an ensemble)."""
    if isinstance(model, EnsembleModel):
        return all(_same_on_tokens(m) for m in model.members)
    return pooled_equivalent(model)


def check_seed_count(seeds) -> int:
    """``seeds`` (heads in a seed ensemble), refused unless a positive integer."""
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ConfigError(f"seeds is the number of heads to train and average (1 for one head), got {seeds!r}.")
    return seeds

