"""Planning a cache before writing it: what each way of storing it costs in bytes, time and quality.

:func:`~.plan.plan_cache` prices every storage choice (:mod:`layercache.extraction.pricing`) and, when the data
has labels, measures what each costs on them (:mod:`.quality`, on a labelled sample: :mod:`.sample`). It sits
above extraction, heads and probes because it uses all three: it runs the backbone on a sample, writes the
sample's caches, and learns from them. :func:`~.checked.extract` is extraction with the same check after a
lossy run (the library's and the command line's ``extract``).
"""

from .checked import extract
from .plan import CachePlan, describe_measurements, plan_cache
from .quality import ChoiceQuality, Cost, QualityReport, measure_quality
from .sample import QualitySample, labelled_sample

__all__ = ["extract", "CachePlan", "plan_cache", "describe_measurements", "ChoiceQuality", "Cost", "QualityReport",
           "measure_quality", "QualitySample", "labelled_sample"]
