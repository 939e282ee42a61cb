"""A head that predicts with the average of several fitted heads: seed ensembles and ensembles of any members.

Functions over fitted heads, which :class:`~..estimator.LayerHead` calls (this module imports no estimator:
what it needs of a head is the protocol :class:`EnsembleHead`, a public surface: the settings, ``fit``, the
validation data of a fit, and the fitted state as one :class:`FittedHead`). :func:`fit_seeds` is ``fit`` with
``seeds=M`` (one head per seed on one validation slice, then their average), :func:`seed_ensemble`
combines heads that differ only in their seed (``LayerHead.from_seeds``, as ``layercache sweep`` combines
its winner's seeds) and :func:`member_ensemble` any heads fitted on the same states
(``LayerHead.from_members``, as its ``--ensemble`` does). Each reads its members' :class:`FittedHead`, composes
the ensemble's own (the average itself is :class:`~.model.EnsembleModel`; validation passes are combined, not run
again: :mod:`.passes`) and hands it to a new head built from the settings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sklearn.base import clone

from ...core.option_names import option
from ...core.tasks import LabelTask
from ...errors import ConfigError
from ...store.feed_pool import FeedPool
from ...store.projection import Projection
from ...store.reader import LayerCache
from ..data.source import pooled_equivalent
from ..network.model import HeadModel
from ..scoring.evaluation import PassResult
from ..scoring.evaluation import score as score_predictions
from ..scoring.selection import Selection
from ..training.class_weights import parse_class_weight
from ..training.collapse import collapse_warnings
from ..training.trainer import TrainConfig, TrainHistory
from .model import EnsembleHistory, EnsembleModel
from .passes import combine_passes

if TYPE_CHECKING:  # a sibling of this package: the type only
    from ..run_folders.run_files import RecordedCache


@dataclass
class FittedHead:
    """What fitting leaves in a head (its attributes ending in ``_``): what an ensemble reads of its members, and
    composes for the head it builds (:meth:`~..estimator.LayerHead.fitted_state`,
    :meth:`~..estimator.LayerHead.set_fitted_state`)."""

    model: HeadModel | EnsembleModel
    tasks: list[LabelTask]
    layer_names: list[str]
    """The states the head reads, in order."""
    source: str
    """``tokens`` or ``pooled:<mode>``."""
    normalize: str
    cache: RecordedCache
    """The identity of the training cache (the run config's ``cache``)."""
    data: dict
    """What the head was trained and validated on (the run's ``data``)."""
    fit: dict
    """How the weights were fitted (the run's ``fit``)."""
    selection: Selection
    train_config: TrainConfig
    history: TrainHistory | EnsembleHistory | None = None
    """How it trained; None for a head loaded from a run folder (a run keeps its history in metrics.json)."""
    validation_pass: PassResult | None = None
    """The predictions on the validation data; None for a loaded head."""
    validation_metrics: dict | None = None
    """``{task: metrics}`` on the validation data; None for a loaded head."""
    warnings: list[str] | None = None
    """Collapse and convergence warnings; None for a loaded head."""
    projection: Projection | None = None
    """The basis of the projected states the head reads (a ``--project`` cache), which its run keeps for the live
    path; None for a cache at the model's width."""
    checkpoints: list = field(default_factory=list)
    """The checkpoints of the fits behind it (:mod:`..training.checkpoint`; empty without)."""


class EnsembleHead(Protocol):
    """What the ensembles need of a head (:class:`~..estimator.LayerHead` is one): its settings (scikit-learn's
    ``get_params`` / ``set_params``), ``fit``, the validation data of its fit, and its fitted state."""

    def get_params(self, deep: bool = True) -> dict:
        """The head's settings (scikit-learn's)."""

    def set_params(self, **params) -> "EnsembleHead":
        """Change settings (scikit-learn's); returns the head."""

    def fit(self, cache: LayerCache, split: str = "train", val_split: str | None = None, *,
            feeds: FeedPool | None = None, deadline: float | None = None, checkpoints: Any = None,
            fresh: bool = False) -> "EnsembleHead":
        """Fit on ``cache``; returns the head."""

    def check_fitted(self) -> None:
        """Refuse a head that is not fitted."""

    def validation_data(self, cache: LayerCache, split: str, val_split: str | None, tasks: list[LabelTask],
                        layer_names: list[str], source: str, feeds: FeedPool | None) -> tuple:
        """(training rows, validation feed, its description), as the head's fit chooses them."""

    def fitted_state(self) -> FittedHead:
        """What fitting left in the head."""

    def set_fitted_state(self, state: FittedHead) -> None:
        """Make the head the fitted head ``state`` describes."""


H = TypeVar("H", bound=EnsembleHead)


def fit_seeds(head: H, cache: LayerCache, split: str, val_split: str | None, feeds: FeedPool,
              deadline: float | None, checkpoints=None, fresh: bool = False) -> H:
    """Fit one head per seed on the same validation data, then make ``head`` their seed ensemble
    (:func:`seed_ensemble`): what ``head.fit`` does with ``seeds > 1``."""
    params = head.get_params()
    slice_seed = params["seed"] if params["val_seed"] is None else params["val_seed"]
    members = []
    for i in range(params["seeds"]):
        member = clone(head).set_params(seeds=1, seed=params["seed"] + i, val_seed=slice_seed)
        member.fit(cache, split, val_split, feeds=feeds, deadline=deadline, checkpoints=checkpoints, fresh=fresh)
        if member.fitted_state().fit["solver"] == "lbfgs":
            raise ConfigError(f"The {params['mixer']} head is fitted by the convex solver, which gives the same "
                              f"weights for every seed, so a seed ensemble adds nothing; leave out {option('seeds')}, "
                              f"or pass {option('solver', 'adamw')}.")
        members.append(member)
    fitted = seed_ensemble(type(head), members, cache, split, val_split, feeds=feeds)
    # the fitted state only: fit() leaves the settings alone
    head.set_fitted_state(replace(fitted.fitted_state(),
                                  checkpoints=[c for m in members for c in m.fitted_state().checkpoints]))
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
        m.check_fitted()
    own = ("seed", "seeds", "val_seed", "progress")
    settings = {k: v for k, v in members[0].get_params().items() if k not in own}
    for i, m in enumerate(members[1:], start=1):
        if {k: v for k, v in m.get_params().items() if k not in own} != settings:
            raise ConfigError(f"Head {i} of the seed ensemble was trained with other settings than head 0; "
                              "combine heads that differ only in their seed (or use from_members).")
    if any(m.fitted_state().fit["solver"] == "lbfgs" for m in members):
        raise ConfigError("A head fitted by the convex solver is the same for every seed; a seed ensemble of such "
                          "heads adds nothing.")
    seeds = [m.get_params()["seed"] for m in members]
    state = ensemble_state(members, cache, split, val_split, feeds, [f"seed {s}" for s in seeds])
    state.history.seeds = seeds
    head = make(**{**members[0].get_params(), "seeds": len(members)})
    head.set_fitted_state(replace(state, fit={**state.fit, "seeds": seeds}, data={**state.data, "seeds": seeds}))
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
    state = ensemble_state(members, cache, split, val_split, feeds, labels)
    head = make(**{**members[0].get_params(), "mixer": state.model.mixer_spec})
    head.set_fitted_state(state)
    return head


def ensemble_state(members: list[EnsembleHead], cache: LayerCache, split: str, val_split: str | None,
                   feeds: FeedPool | None, labels: list[str] | None) -> FittedHead:
    """The fitted state of the ensemble of ``members`` (see :func:`member_ensemble`), each member checked first."""
    if len(members) < 2:
        raise ConfigError(f"An ensemble needs at least 2 fitted heads, got {len(members)}.")
    for m in members:
        m.check_fitted()
    fitted = [m.fitted_state() for m in members]
    first = fitted[0]
    for i, m in enumerate(fitted[1:], start=1):
        if ([t.to_json() for t in m.tasks] != [t.to_json() for t in first.tasks]
                or (m.layer_names, m.data.get("validation"), m.cache)
                != (first.layer_names, first.data.get("validation"), first.cache)):
            raise ConfigError(f"Head {i} of the ensemble predicts other tasks, reads other states or was validated "
                              "on other data than head 0; combine heads fitted on one cache alike.")
    source = _common_source(fitted, cache)
    labels = list(labels) if labels is not None else [m.model.mixer_spec for m in fitted]
    tasks = first.tasks
    model = EnsembleModel([m.model for m in fitted]).eval()
    _, val_feed, val_desc = members[0].validation_data(cache, split, val_split, tasks, first.layer_names, source,
                                                       feeds)
    if val_desc != first.data.get("validation"):
        raise ConfigError(f"The heads were validated on {first.data.get('validation')}, not on {val_desc}; pass "
                          "the split and validation split they were fitted with.")
    loaded = next((i for i, m in enumerate(fitted) if m.validation_pass is None or m.history is None), None)
    if loaded is not None:
        raise ConfigError(f"Head {loaded} of the ensemble has no validation pass: it was loaded from a run folder, "
                          "not fitted here; combine heads fitted in this process.")
    validation_pass = combine_passes([m.validation_pass for m in fitted], tasks)
    metrics = {t.name: score_predictions(t, val_feed.gold(t.name), validation_pass.predictions[t.name])
               for t in tasks}
    class_weight = parse_class_weight(members[0].get_params()["class_weight"], tasks)
    warnings = collapse_warnings(tasks, val_feed, validation_pass, first.selection, class_weight, exact=False)
    solvers = sorted({m.fit["solver"] for m in fitted})
    fit = {"solver": solvers[0] if len(solvers) == 1 else "+".join(solvers), "members": labels,
           "combine": "mean of class probabilities (per word for token tasks; regression: of predictions)"}
    return FittedHead(model=model, tasks=list(tasks), layer_names=list(first.layer_names), source=source,
                      normalize=first.normalize, cache=first.cache, data={**first.data, "members": labels}, fit=fit,
                      selection=first.selection, train_config=first.train_config,
                      history=EnsembleHistory([m.history for m in fitted], labels), validation_pass=validation_pass,
                      validation_metrics=metrics, warnings=warnings, projection=first.projection)


def _common_source(members: list[FittedHead], cache: LayerCache) -> str:
    """The source every member of an ensemble can read: theirs when they share one, else token states
    when every member on pooled vectors gives identical results on them (:func:`~..data.source.pooled_equivalent`)."""
    sources = list(dict.fromkeys(m.source for m in members))
    if len(sources) == 1:
        return sources[0]
    odd = [m for m in members if m.source != "tokens" and not _same_on_tokens(m.model)]
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

