"""Heads learned from a layer cache: layer mixers, task heads, the trainer and run folders.

The public names (``__all__``) are imported when first asked for (PEP 562), so importing one module of this
package (``layercache.heads.head_options``, which ``--help`` reads) loads neither its siblings nor torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.lazy_exports import lazy_exports

# public name -> the module that defines it (imported when first asked for: a submodule imported alone
# does not load its siblings)
_PUBLIC = {
    "LayerHead": ".estimator",
    "HeadModel": ".network.model",
    "TrainConfig": ".training.trainer",
    "TrainHistory": ".training.trainer",
    "TrainResult": ".workflow",
    "train_model": ".training.trainer",
    "train_head": ".workflow",
    "evaluate_run": ".workflow",
    "RunEvaluation": ".workflow",
    "read_run": ".workflow",
    "MIXERS": ".mixers",
    "LayerMixer": ".mixers",
    "MixOutput": ".mixers",
    "make_mixer": ".mixers",
    "mixer_from_config": ".mixers",
    "mixer_names": ".mixers",
    "per_token_usage": ".token_usage",
    "SELECTION_METRICS": ".scoring.selection",
    "sweep": ".sweeps.sweep",
    "SweepResult": ".sweeps.sweep",
    "CandidateResult": ".sweeps.sweep",
    "Candidate": ".sweeps.sweep",
    "candidate_grid": ".sweeps.sweep",
    "EnsembleModel": ".ensembles.model",
    "paired_bootstrap": ".scoring.bootstrap",
    "PairedComparison": ".scoring.bootstrap",
    "validation_slice": "..core.holdout",
    "default_metric": ".scoring.selection",
}

if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from ..core.holdout import validation_slice
    from .ensembles.model import EnsembleModel
    from .estimator import LayerHead
    from .mixers import MIXERS, LayerMixer, MixOutput, make_mixer, mixer_from_config, mixer_names
    from .network.model import HeadModel
    from .scoring.bootstrap import PairedComparison, paired_bootstrap
    from .scoring.selection import SELECTION_METRICS, default_metric
    from .sweeps.sweep import Candidate, CandidateResult, SweepResult, candidate_grid, sweep
    from .token_usage import per_token_usage
    from .training.trainer import TrainConfig, TrainHistory, train_model
    from .workflow import RunEvaluation, TrainResult, evaluate_run, read_run, train_head

__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)
__all__ = ["LayerHead", "HeadModel", "TrainConfig", "TrainHistory", "TrainResult", "RunEvaluation", "train_model",
           "train_head", "evaluate_run", "read_run", "MIXERS", "LayerMixer", "MixOutput", "make_mixer",
           "mixer_from_config", "mixer_names", "per_token_usage", "SELECTION_METRICS", "sweep",
           "SweepResult", "CandidateResult", "Candidate", "candidate_grid", "EnsembleModel",
           "paired_bootstrap", "PairedComparison", "validation_slice", "default_metric"]
