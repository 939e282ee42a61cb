"""A head that predicts with the average of several fitted heads: seed ensembles and ensembles of any members.

:class:`HeadEnsembles` is a base of :class:`~.estimator.LayerHead` and gives it ``fit`` with ``seeds=M``
(one head per seed on one validation slice, then their average), :meth:`~HeadEnsembles.from_seeds`
(heads that differ only in their seed, as ``layercache sweep`` combines its winner's seeds) and
:meth:`~HeadEnsembles.from_members` (any heads fitted on the same states, as its ``--ensemble`` does).
The average itself is :class:`~.ensemble_model.EnsembleModel`; validation passes are combined, not
run again (:mod:`.ensemble`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sklearn.base import clone

from ..errors import ConfigError
from ..store.feed_pool import FeedPool
from ..store.reader import LayerCache
from .class_weights import parse_class_weight
from .ensemble import combine_passes
from .ensemble_model import EnsembleHistory, EnsembleModel
from .evaluation import score as score_predictions
from .model import HeadModel
from .source import pooled_equivalent

if TYPE_CHECKING:
    from .estimator import LayerHead


class HeadEnsembles:
    """The ensembles of :class:`~.estimator.LayerHead` (a base class of it; not used alone)."""

    def _fit_seeds(self, cache: LayerCache, split: str, val_split: str | None, feeds: FeedPool,
                   deadline: float | None) -> "LayerHead":
        """Fit one head per seed on the same validation data, then become their seed ensemble (:meth:`from_seeds`)."""
        slice_seed = self.seed if self.val_seed is None else self.val_seed
        members = []
        for i in range(self.seeds):
            member = clone(self).set_params(seeds=1, seed=self.seed + i, val_seed=slice_seed)
            member.fit(cache, split, val_split, feeds=feeds, deadline=deadline)
            if member.fit_["solver"] == "lbfgs":
                raise ConfigError(f"The {self.mixer} head is fitted by the convex solver, which gives the same weights "
                                  "for every seed, so a seed ensemble adds nothing; leave out seeds (--seeds), or "
                                  "pass solver='adamw' (--solver adamw).")
            members.append(member)
        fitted = self.from_seeds(members, cache, split, val_split, feeds=feeds)
        for name, value in vars(fitted).items():  # the fitted attributes only: fit() leaves the settings alone
            if name.endswith("_"):
                setattr(self, name, value)
        return self

    @classmethod
    def from_seeds(cls, members: list["LayerHead"], cache: LayerCache, split: str = "train",
                   val_split: str | None = None, *, feeds: FeedPool | None = None) -> "LayerHead":
        """One head that predicts with the average of ``members``, heads that differ only in their seed.

        ``members``: heads fitted on ``cache`` (``split``, ``val_split`` as their :meth:`fit` had them)
        with the same settings but the seed, all validated on the same data (a seed ensemble,
        :mod:`.ensemble_model`). ``fit_["seeds"]`` lists the members' seeds; the head's settings
        are the first member's with ``seeds`` the number of members. See :meth:`from_members`.
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
        head = cls.from_members(members, cache, split, val_split, feeds=feeds, labels=[f"seed {s}" for s in seeds])
        head.set_params(**{**members[0].get_params(), "seeds": len(members)})
        head.history_.seeds = seeds
        head.fit_ = {**head.fit_, "seeds": seeds}
        head.data_["seeds"] = seeds
        return head

    @classmethod
    def from_members(cls, members: list["LayerHead"], cache: LayerCache, split: str = "train",
                     val_split: str | None = None, *, feeds: FeedPool | None = None,
                     labels: list[str] | None = None) -> "LayerHead":
        """One head that predicts with the average of ``members`` (an ensemble, :mod:`.ensemble_model`).

        ``members``: heads (any mixers, single heads or ensembles) fitted on ``cache`` for the same
        tasks from the same states, validated on the same data (``split`` and ``val_split`` as
        their :meth:`fit` had them). Their validation passes are combined (no pass is run again) and
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
        head = cls(**{**first.get_params(), "mixer": model.mixer_spec})
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

def _common_source(members: list[LayerHead], cache: LayerCache) -> str:
    """The source every member of an ensemble can read: theirs when they share one, else token states
    when every member on pooled vectors gives identical results on them (:func:`~.source.pooled_equivalent`)."""
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

