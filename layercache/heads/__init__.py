"""Heads learned from a layer cache: layer mixers, task heads, the trainer and run folders."""

from layercache.core.holdout import validation_slice
from layercache.heads.ensembles.model import EnsembleModel
from layercache.heads.estimator import LayerHead
from layercache.heads.mixers import (
    MIXERS,
    LayerMixer,
    MixOutput,
    make_mixer,
    mixer_from_config,
    mixer_names,
)
from layercache.heads.network.model import HeadModel
from layercache.heads.scoring.bootstrap import PairedComparison, paired_bootstrap
from layercache.heads.scoring.selection import SELECTION_METRICS, default_metric
from layercache.heads.sweeps.sweep import Candidate, CandidateResult, SweepResult, candidate_grid, sweep
from layercache.heads.token_usage import per_token_usage
from layercache.heads.training.trainer import TrainConfig, TrainHistory, train_model
from layercache.heads.workflow import TrainResult, evaluate_run, read_run, train_head

__all__ = ["LayerHead", "HeadModel", "TrainConfig", "TrainHistory", "TrainResult", "train_model",
           "train_head", "evaluate_run", "read_run", "MIXERS", "LayerMixer", "MixOutput", "make_mixer",
           "mixer_from_config", "mixer_names", "per_token_usage", "SELECTION_METRICS", "sweep",
           "SweepResult", "CandidateResult", "Candidate", "candidate_grid", "EnsembleModel",
           "paired_bootstrap", "PairedComparison", "validation_slice", "default_metric"]
