"""Probes read from a layer cache: a linear probe on every layer at once, control tasks, selectivity.

    from layercache.probes import LinearProbes, selectivity
    probes = LinearProbes(task="negation_scope").fit(cache)      # every layer, C chosen per layer
    probes.scores_, probes.best_layer_, probes.score(cache, "test")
    selectivity(cache, "negation_scope").selectivity             # task - control accuracy, per layer
    OnlineCodeMDL(task="sentiment").fit(cache).codelength_       # MDL (online code) in bits, per layer
    CumulativeProbes(task="sentiment").fit(cache).scores_        # probe on the mix of layers 0..l, per l

This package reads caches only (``layercache.store``): it never loads a backbone.
"""

from .base import Probe
from .control import ControlTask
from .cumulative import CumulativeProbes
from .linear import LinearProbes
from .mdl import OnlineCodeMDL
from .registry import PROBES, probe_class
from .selectivity import Selectivity, selectivity

__all__ = ["Probe", "LinearProbes", "CumulativeProbes", "OnlineCodeMDL", "ControlTask", "Selectivity", "selectivity",
           "PROBES", "probe_class"]
