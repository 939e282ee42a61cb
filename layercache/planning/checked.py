"""``extract`` that knows what its storage costs: a lossy cache's quality measured on its own labels and recorded.

    result = extract("minilm", split_files={...}, storage_dtype="int4", project=96, max_loss=1.0)
    result.quality            # what ``manifest.extraction.quality`` records; ``layercache info`` shows it

After :func:`layercache.extraction.run.extract` has written (or resumed, or found complete) a cache whose storage
loses information (int8, int4, a projection), the run takes the plan's labelled sample of the same data
(:func:`~.sample.labelled_sample`, seeded by ``quality_seed``), forwards it once, and measures the stored choice
against float32 states exactly as ``layercache plan`` does (:class:`~.quality.QualityCheck`: per-state probes and a
quick head, every task, points of its metric with a 95 % interval). The cost goes into the manifest
(``extraction.quality``). With ``max_loss``, a cost whose interval reaches past it is warned about in one sentence
that names the smallest more faithful choice measured to stay within it.

It reuses the data and backbone the extraction loaded, so the model is not loaded twice, and it runs once: a rerun
of a complete cache with the same sample size and seed finds the cost recorded. Under torchrun, or with
``quality_examples=0``, nothing is measured (``layercache plan`` measures the same before a run). A cache without
labels, or with too few, is left as written, and the log says why.
"""

from __future__ import annotations

import inspect
import logging

from ..core.option_names import option, options
from ..core.threads import computes
from ..extraction.housekeeping import locked_output, write_errors
from ..extraction.job import ExtractResult, JobInputs
from ..extraction.run import ExtractionCall, extraction_call, run_extraction
from ..extraction.run import extract as _extract
from ..extraction.storage_choices import StorageChoice, choice_bytes, standard_choices
from ..progress import steps_progress
from ..store.manifest import Manifest, read_manifest, write_manifest
from ..store.quality_record import describe_quality
from .plan import check_quality_options
from .quality import ChoiceQuality, QualityCheck
from .sample import DEFAULT_EXAMPLES, labelled_sample

__all__ = ["extract", "is_lossy", "stored_choice"]

log = logging.getLogger("layercache")

def stored_choice(manifest: Manifest) -> StorageChoice:
    """The storage choice a cache's manifest records (``tokens int4 + project 96``)."""
    stored = manifest.storage
    return StorageChoice(stored.store, stored.dtype, stored.project or None)


def is_lossy(manifest: Manifest) -> bool:
    """Whether a cache's states lose what a learner may feel (:attr:`StorageChoice.lossy`)."""
    return stored_choice(manifest).lossy


@computes
def extract(*args, quality_examples: int = DEFAULT_EXAMPLES, max_loss: float | None = None, quality_seed: int = 0,
            **kwargs) -> ExtractResult:
    """:func:`layercache.extraction.run.extract` (every argument of it), then a lossy cache's quality measured.

    ``quality_examples``: the labelled sample's size (examples of the first split learned on; 0: not measured).
    ``max_loss``: points of any task's metric the stored choice may lose; above it (95 % interval), a warning
    names a more faithful choice. ``quality_seed`` draws the sample and seeds its learners. See the module
    docstring; the result's :attr:`~ExtractResult.quality` holds what the manifest records.
    """
    call = extraction_call(*args, **kwargs)
    check_quality_options(quality_examples, max_loss, 1)
    loaded: list[JobInputs] = []
    result = run_extraction(call, on_loaded=loaded.append)
    if quality_examples and is_lossy(result.manifest) and result.manifest.tasks:
        if not loaded:  # under torchrun (the ranks load their own) nothing is measured: the plan does it
            log.info("The quality of %s is not measured under torchrun; `layercache plan` measures it before a "
                     "run.", stored_choice(result.manifest).name)
        else:
            _measure(result, call, loaded[0], quality_examples, max_loss, quality_seed)
    return result


extract.__signature__ = inspect.signature(_extract).replace(parameters=[
    *(p for p in inspect.signature(_extract).parameters.values() if p.kind != p.VAR_KEYWORD),
    *(p for p in inspect.signature(extract).parameters.values() if p.kind == p.KEYWORD_ONLY)])


def _measure(result: ExtractResult, call: ExtractionCall, inputs: JobInputs, examples: int,
             max_loss: float | None, seed: int) -> None:
    """Measure (or read back) the cost of ``result``'s storage; record it; warn above ``max_loss``."""
    manifest = result.manifest
    recorded = manifest.extraction.quality
    if _stale(recorded, seed, examples, max_loss):
        choice = stored_choice(manifest)
        with steps_progress(call.progress, 4, "quality") as step:
            step(f"quality of {choice.name}: forwarding a labelled sample")
            sample = labelled_sample(inputs, call.batching, examples, seed)
            if sample is None:
                log.info("The quality of %s is not measured: fewer labelled examples than a loss could be told from "
                         "noise on.", choice.name)
                return
            with QualityCheck(sample, call.storage, seed=seed, step=step) as check:
                check.probes([choice])
                quality = check.head_if_lossy(choice)
                faithful = _more_faithful(check, manifest, inputs, choice, max_loss) \
                    if max_loss is not None and not quality.within(max_loss) else None
                recorded = _recorded(quality, sample.describe(), seed, examples, check.report().seconds, max_loss,
                                     faithful)
        manifest = _record(result, recorded)
        log.info("Quality of %s on %s: %s.", choice.name, recorded["sample"], describe_quality(recorded))
    result.manifest = manifest
    beyond = _beyond(recorded, max_loss)
    if beyond is not None:
        task, cost = beyond
        better = recorded.get("more_faithful")
        fix = (f"re-extract with {options(**better['keywords'], overwrite=True)} ({better['choice']}, measured within "
               "it)" if better else "no larger choice was measured within it on this sample (a larger "
               f"{option('quality_examples')} narrows the intervals); the most faithful is "
               f"{options(storage_dtype='float16', overwrite=True)}")
        log.warning("The stored %s loses %.1f points of %s's %s (95 %% interval %.1f to %.1f) on a labelled sample, "
                    "beyond %s; %s.", recorded["choice"], cost["loss_points"], task, cost["metric"],
                    *cost["interval_points"], option("max_loss", max_loss), fix)


def _stale(recorded: dict | None, seed: int, examples: int, max_loss: float | None) -> bool:
    """Whether the recorded cost does not answer this run: none, another sample, or a ``max_loss`` it is beyond
    whose more faithful choice was not looked for."""
    if recorded is None or recorded.get("seed") != seed or recorded.get("examples") != examples:
        return True
    return _beyond(recorded, max_loss) is not None and recorded.get("max_loss_points") != max_loss


def _more_faithful(check: QualityCheck, manifest: Manifest, inputs: JobInputs, yours: StorageChoice,
                   max_loss: float) -> ChoiceQuality | None:
    """The smallest choice larger than ``yours`` (in bytes) measured to lose at most ``max_loss``: probes first,
    then the quick head of one whose probes hold; None if none does."""
    sizes = {c: choice_bytes(manifest, inputs.plans, c) for c in standard_choices(manifest) if c.store == yours.store}
    least = choice_bytes(manifest, inputs.plans, yours)
    for choice in sorted((c for c, size in sizes.items() if size > least and c != yours), key=sizes.get):
        check.probes([choice])
        if check.report().of(choice.name).within(max_loss) and check.head_if_lossy(choice).within(max_loss):
            return check.report().of(choice.name)
    return None


def _recorded(quality: ChoiceQuality, sample: str, seed: int, examples: int, seconds: float,
              max_loss: float | None, faithful: ChoiceQuality | None) -> dict:
    """What ``extraction.quality`` records (:data:`layercache.store.schema.QUALITY`)."""
    recorded = {"choice": quality.name, "sample": sample, "seed": seed, "examples": examples,
                "seconds": round(seconds, 2), "probes": {t: c.to_json() for t, c in quality.probes.items()}}
    if quality.head:
        recorded["head"] = {t: c.to_json() for t, c in quality.head.items()}
    if max_loss is not None:
        recorded["max_loss_points"] = max_loss
    if faithful is not None:
        recorded["more_faithful"] = {"choice": faithful.name, "keywords": faithful.choice.keywords,
                                     "worst_high_points": round(faithful.worst.high, 2)}
    return recorded


def _record(result: ExtractResult, recorded: dict) -> Manifest:
    """Write ``recorded`` into the cache's manifest, under the cache's lock (the manifest as it is on disk)."""
    with locked_output(result.path), write_errors(result.path):
        manifest = read_manifest(result.path)
        manifest.extraction.quality = recorded
        write_manifest(result.path, manifest)
    return manifest


def _beyond(recorded: dict, max_loss: float | None) -> tuple[str, dict] | None:
    """The (task, cost) that puts the recorded choice beyond ``max_loss`` (:meth:`~.quality.ChoiceQuality.within`'s
    rule: a probe's interval reaching past it, else a quick head's lying wholly past it); None if none does."""
    if max_loss is None:
        return None
    probes = [(t, c) for t, c in (recorded.get("probes") or {}).items() if c["interval_points"][1] > max_loss]
    heads = [(t, c) for t, c in (recorded.get("head") or {}).items() if c["interval_points"][0] > max_loss]
    found = probes or heads
    return max(found, key=lambda item: item[1]["interval_points"][1]) if found else None

