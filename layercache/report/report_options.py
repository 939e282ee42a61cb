"""What the probe report computes, each option declared once for :func:`~.probing.probe_report` and for
``layercache probe-report`` (a field and its :class:`~layercache.core.option_specs.Flag`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.holdout import DEFAULT_MAX_TRAIN
from ..core.option_specs import Flag, field_default, option_field, option_spec, spec_fields, spec_from_keywords


@option_spec
@dataclass(frozen=True)
class ReportOptions:
    """The probe report's options (see :func:`~.probing.build_probe_report` for what each does)."""

    tasks: Sequence[str] | None = option_field(None, Flag(
        "--task", "Task(s) to probe; repeatable.", reader="list", show_default="every task in the cache"))
    """The tasks to probe (default: every task of the cache)."""
    eval_split: str | None = option_field(None, Flag(
        "--eval-split", "Split the scores are reported on.",
        show_default="test when present, else the validation split"))
    """The split scores are reported on (default: the test split when there is one, else the validation split)."""
    runs: Sequence[str | os.PathLike] = option_field((), Flag(
        "--run", "More run folders of this cache to show (those in <cache>.runs are found); repeatable.",
        reader="list"))
    """More run folders to show beside those found in ``<cache>.runs/``."""
    act_run: str | os.PathLike | None = option_field(None, Flag(
        "--act-run", "An act run whose per-token depth to break down by token category.",
        show_default="the newest act run found, else one trained for the report"))
    """The ``act`` run whose per-token depth is broken down by token category (default: the newest found)."""
    train_act: bool = option_field(True, Flag(
        "--train-act/--no-train-act", "Train an act head for per-token depth when none exists."))
    """Train a quick ``act`` head for per-token depth when the cache stores token states and no run has one."""
    act_epochs: int = option_field(8, Flag("--act-epochs", "Epochs of that act head."))
    mdl: bool = option_field(True, Flag("--mdl/--no-mdl", "Online-code MDL per layer (the slowest part)."))
    cumulative: bool = option_field(True, Flag(
        "--cumulative/--no-cumulative", "Cumulative scoring: a probe on the mix of layers 0..l for every l."))
    tuned_lens: bool = option_field(True, Flag(
        "--tuned-lens/--no-tuned-lens", "On a decoder cache, fit a tuned lens and the linear shortcut on the train "
                                        "split and score them beside the logit lens (the --lens-* options)."))
    """On a decoder cache with lens weights: fit a tuned lens (KL) and the linear shortcut (least squares) on the
    train split and score them beside the logit lens (:mod:`layercache.depth.tuned_lens`)."""
    seed: int = option_field(0, Flag("--seed", "Seed for validation slices, control tasks and samples."))
    max_train: int | None = option_field(DEFAULT_MAX_TRAIN, Flag(
        "--max-train", "Fit each task's probes on a seeded sample of at most N training examples (words); 0 or all: "
                       "every one.", reader="max_train", typed_default=str(DEFAULT_MAX_TRAIN)))
    """Fit every probe of a task on at most this many training examples (words); None: every one."""


def report_options(given: ReportOptions | None, keywords: Mapping[str, Any], function: str) -> ReportOptions:
    """``given``, or the options of ``function``'s flat ``keywords`` (a keyword it does not take is a TypeError, as
    in any call; one beside ``given`` is refused)."""
    names = {f.name for f in spec_fields(ReportOptions)}
    unknown = sorted(set(keywords) - names)
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}")
    flat = {f.name: keywords.get(f.name, field_default(f)) for f in spec_fields(ReportOptions)}
    options: ReportOptions = spec_from_keywords(ReportOptions, given, flat, "options")
    return options
