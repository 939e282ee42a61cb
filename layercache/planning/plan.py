"""``plan_cache``: what each way of storing a cache costs, in bytes, time and quality, before a byte is written.

    plan = plan_cache("minilm", DataSpec(split_files={"train": "train.tsv", "validation": "dev.tsv"}))
    plan.recommendation        # the choice and why; plan.rows: one priced row per choice
    plan.quality.of("tokens int8 + project 96").worst   # its worst measured loss, in points, with its interval

Bytes and time are :mod:`layercache.extraction.pricing`'s (the model of cost is there). Quality is measured
when the data has labels (:mod:`.quality`): a seeded, stratified labelled sample (:mod:`.sample`) is forwarded
once, that forward is also the plan's timing of the backbone (the forward speed the times are priced at), and
every storage choice's cache of the sample is written from it and learned from. ``max_loss`` (points of each
task's metric) then makes the recommendation the smallest choice that fits, pays, and costs at most that
with 95 % confidence; the plan says when the sample is too small to tell.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..core.option_names import option, options
from ..core.threads import computes
from ..core.units import human_bytes, human_seconds
from ..errors import ConfigError
from ..extraction.job import load_inputs
from ..extraction.measure import DISK_PROBE_BYTES, DiskSpeed, ForwardSpeed, forward_speed
from ..extraction.pricing import SAMPLE_BATCHES, check_plan_options, price_choices
from ..extraction.specs import BatchSpec, DataSpec, StorageSpec
from ..extraction.storage_choices import NO_CACHE, PricedChoice, recommend
from ..progress import steps_progress
from ..store.paths import default_cache_path
from ..store.storage import codec
from .quality import HEAD_EPOCHS, QualityCheck, QualityReport
from .sample import DEFAULT_EXAMPLES, MIN_TEST, MIN_TRAIN, labelled_sample

__all__ = ["CachePlan", "plan_cache", "describe_measurements", "DEFAULT_EXAMPLES"]


@dataclass
class CachePlan:
    """What :func:`plan_cache` found: the measured inputs, one priced row per choice, their measured quality and
    the recommendation."""

    model: str
    device: str
    forward_dtype: str
    splits: dict[str, dict[str, int]]
    """split -> {"examples": n, "tokens": t} as planned."""
    epoch_split: str | None
    folder: Path
    """The existing folder nearest ``out``: where free space and disk speed were measured."""
    free_bytes: int
    space_bytes: int
    """What ``fits`` is judged against: the free space, or a smaller ``disk_budget``."""
    memory_bytes: int | None
    forward: ForwardSpeed | None
    disk: DiskSpeed | None
    storage_dtype: str
    """The storage dtype of the user's choice (``auto`` resolved, see :attr:`storage_dtype_reason`)."""
    storage_dtype_reason: str | None
    rows: list[PricedChoice]
    recommended: str
    recommendation: str
    quality: QualityReport | None = None
    """Each choice's measured cost on the user's labels; None without labels or with ``quality_examples=0``."""
    max_loss: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def yours(self) -> PricedChoice:
        """The row of the choice the given options make."""
        return next(r for r in self.rows if r.yours)

    def to_json(self) -> dict:
        """The plan as plain JSON (bytes, seconds, bytes per second, quality in points; null where not measured)."""
        forward, disk = self.forward, self.disk
        return {
            "model": self.model, "device": self.device, "forward_dtype": self.forward_dtype, "splits": self.splits,
            "epoch_split": self.epoch_split, "folder": str(self.folder), "free_bytes": self.free_bytes,
            "space_bytes": self.space_bytes, "memory_available_bytes": self.memory_bytes,
            "forward": None if forward is None else {
                "tokens": forward.tokens, "seconds": forward.seconds, "batches": forward.batches,
                "tokens_per_second": forward.tokens_per_second, "largest_state_value": forward.largest},
            "disk": None if disk is None else {
                "probe_bytes": disk.probe_bytes, "write_bytes_per_second": disk.write_bytes_per_second,
                "read_bytes_per_second": disk.read_bytes_per_second, "evicted": disk.evicted,
                "filesystem": disk.filesystem},
            "storage_dtype": self.storage_dtype, "storage_dtype_reason": self.storage_dtype_reason,
            "choices": [r.to_json() for r in self.rows], "yours": self.yours.name,
            "quality": None if self.quality is None else self.quality.to_json(), "max_loss_points": self.max_loss,
            "recommended": self.recommended, "recommendation": self.recommendation, "notes": list(self.notes),
        }


@computes
def plan_cache(model: str = "minilm", data: DataSpec | None = None, storage: StorageSpec | None = None,
               batching: BatchSpec | None = None, *, out: str | os.PathLike | None = None, project: int | None = None,
               disk_budget: int | None = None, sample_batches: int = SAMPLE_BATCHES,
               disk_probe_bytes: int = DISK_PROBE_BYTES, allow_pickle: bool = False, progress: bool = True,
               quality_examples: int = DEFAULT_EXAMPLES, max_loss: float | None = None, seed: int = 0,
               head_epochs: int = HEAD_EPOCHS) -> CachePlan:
    """Price every way to store ``model``'s states of ``data`` before writing any (see the module docstring).

    The options are ``extract``'s (``data``, ``storage``, ``batching``, ``out``); ``project`` is the
    projection width the user has in mind (priced beside D/2, D/4, D/8 and marked as their choice);
    ``disk_budget`` judges ``fits`` against at most that many bytes. ``quality_examples``: the labelled
    sample's size (examples of the first split learned on; 0: quality not measured, and then
    ``sample_batches`` planned batches are timed instead, 0: no forward, timings not measured).
    ``max_loss``: the most points of any task's metric the recommended choice may lose (None: the most
    faithful choice that fits and pays). ``seed`` draws the sample and seeds the learners; ``head_epochs``:
    the quick head's epochs. Writes nothing but temporary files it removes. ``progress`` shows the steps.
    """
    data, storage, batching = data or DataSpec(), storage or StorageSpec(), batching or BatchSpec()
    if project is None:
        project = storage.project  # extract's own --project
    check_plan_options(project, disk_budget, sample_batches, disk_probe_bytes)
    check_quality_options(quality_examples, max_loss, head_epochs)
    out = Path(out).expanduser() if out is not None else default_cache_path(model, data.dataset or "files",
                                                                            data.config)
    with steps_progress(progress, 5, "plan") as step:
        step("loading the data and the model, tokenizing")
        inputs = load_inputs(model, data, storage, batching, allow_pickle=allow_pickle)
        sample = None
        if quality_examples:
            step("forwarding a labelled sample (timed)")
            sample = labelled_sample(inputs, batching, quality_examples, seed)
        if sample is not None:
            forward = sample.forward
        else:
            step("timing the forward pass")
            first = next((n for n, p in inputs.plans.items() if p.batches), None)
            forward = forward_speed(inputs.backbone, inputs.plans[first], inputs.keep, sample_batches) \
                if first and sample_batches else None
        priced = price_choices(inputs, data, storage, batching, out=out, project=project, disk_budget=disk_budget,
                               forward=forward, disk_probe_bytes=disk_probe_bytes, step=step)
        preferred16 = priced.storage_dtype if codec(priced.storage_dtype).bytes_per_value == 2 else "float16"
        recommended, text = recommend(priced.rows, priced.space_bytes, preferred16=preferred16)
        quality, notes = None, list(priced.notes)
        if sample is not None:
            with QualityCheck(sample, storage, seed=seed, head_epochs=head_epochs, step=step) as check:
                check.probes([r.choice for r in priced.rows if r.choice.store != NO_CACHE])
                for row in (next(r for r in priced.rows if r.yours), recommended):
                    if row.choice.store != NO_CACHE:
                        check.head_if_lossy(row.choice)  # the heads the answer rests on: yours, the recommended
                if max_loss is not None:
                    recommended, text, more = _within_loss(priced.rows, check, max_loss, priced.space_bytes,
                                                           recommended, text)
                    notes += more
                quality = check.report()
    if quality_examples and sample is None:
        notes.append("quality not measured: the data has no labels" if not inputs.records.tasks else
                     f"quality not measured: fewer than {MIN_TRAIN} labelled examples to learn on or {MIN_TEST} to "
                     "score on (or too little memory for them): a loss could not be told from noise")
    m = priced.manifest
    return CachePlan(
        model=m.model.name, device=str(inputs.backbone.device), forward_dtype=m.model.forward_dtype,
        splits={n: {"examples": len(p.examples), "tokens": p.n_tokens} for n, p in inputs.plans.items()},
        epoch_split=priced.epoch_split, folder=priced.folder, free_bytes=priced.free_bytes,
        space_bytes=priced.space_bytes, memory_bytes=priced.memory_bytes, forward=forward, disk=priced.disk,
        storage_dtype=priced.storage_dtype, storage_dtype_reason=priced.storage_dtype_reason, rows=priced.rows,
        recommended=recommended.name, recommendation=text, quality=quality, max_loss=max_loss, notes=notes)


def check_quality_options(quality_examples: int, max_loss: float | None, head_epochs: int) -> None:
    if quality_examples < 0:
        raise ConfigError(f"{option('quality_examples')} must be 0 (quality not measured) or more, got "
                          f"{quality_examples}.")
    if max_loss is not None and (not math.isfinite(max_loss) or max_loss < 0):
        raise ConfigError(f"{option('max_loss')} is the most points a choice may lose, 0 or more; got {max_loss}.")
    if max_loss is not None and not quality_examples:
        raise ConfigError(f"{option('max_loss')} needs the quality measured; leave out "
                          f"{option('quality_examples', 0)}.")
    if head_epochs < 1:
        raise ConfigError(f"{option('head_epochs')} must be at least 1, got {head_epochs}.")


def _within_loss(rows: list[PricedChoice], check: QualityCheck, max_loss: float, space: int,
                 fallback: PricedChoice, fallback_text: str) -> tuple[PricedChoice, str, list[str]]:
    """The smallest choice that fits, pays and loses at most ``max_loss`` points with 95 % confidence, by its probes
    and by its quick head (measured here, smallest candidate first, until one holds).

    A choice whose loss is under ``max_loss`` but whose interval reaches past it is not chosen, and the plan
    says the sample is too small to tell; without any such choice the usual recommendation stands.
    """
    measured = check.report()
    candidates = []
    for row in rows:
        quality = measured.of(row.name)
        if row.choice.store == NO_CACHE or quality is None or not row.fits:
            continue
        if row.breakeven_epochs is not None and math.isinf(row.breakeven_epochs):
            continue
        candidates.append(row)
    unsure, best = [], None
    for row in sorted(candidates, key=lambda r: r.bytes):
        if not check.report().of(row.name).within(max_loss):  # the probes alone rule it out: no head needed
            _note_unsure(check.report().of(row.name), max_loss, unsure)
            continue
        if check.head_if_lossy(row.choice).within(max_loss):
            best = row
            break
        _note_unsure(check.report().of(row.name), max_loss, unsure)
    notes = []
    if unsure:
        notes.append(f"the sample is too small to tell whether {', '.join(unsure)} lose(s) at most {max_loss:g} "
                     f"points: the loss measured is below it, its 95 % interval reaches past it (a larger "
                     f"{option('quality_examples')} narrows it)")
    if best is None:
        return fallback, (f"{fallback_text} No choice that fits was shown to lose at most {max_loss:g} points of any "
                          "task's metric."), notes
    worst = check.report().of(best.name).worst
    text = (f"Recommended: {best.name} ({human_bytes(best.bytes)}): the smallest choice that fits {human_bytes(space)}"
            f" and loses at most {max_loss:g} points (worst: {worst.metric} {worst.loss:+.2f}, 95 % up to "
            f"{worst.high:.2f}); pass {options(**best.choice.keywords)} to extract it.")
    return best, text, notes


def _note_unsure(quality, max_loss: float, unsure: list[str]) -> None:
    """Name a choice whose measured loss is within ``max_loss`` but whose interval is not."""
    worst = quality.worst
    if worst is not None and worst.loss <= max_loss < worst.high:
        unsure.append(quality.name)


def describe_measurements(plan: CachePlan) -> list[tuple[str, str]]:
    """(what, value) lines of the measured inputs, for the command's output."""
    forward, disk = plan.forward, plan.disk
    lines = [("device", f"{plan.device} ({plan.forward_dtype} forward)")]
    lines.append(("forward", "not measured" if forward is None else
                  f"{forward.tokens_per_second:,.0f} tokens/s ({forward.tokens:,} tokens in {forward.batches} planned "
                  f"batch{'es' if forward.batches != 1 else ''}, {human_seconds(forward.seconds)})"))
    lines.append(("tokens", ", ".join(f"{n}: {s['examples']:,} examples, {s['tokens']:,} tokens"
                                      for n, s in plan.splits.items())))
    if disk is None:
        lines.append(("disk", "not measured"))
    else:
        fs = f", {disk.filesystem}" if disk.filesystem else ""
        lines.append(("disk", f"read {disk.read_bytes_per_second / 1e6:,.0f} MB/s cold, write "
                              f"{disk.write_bytes_per_second / 1e6:,.0f} MB/s with fsync "
                              f"({human_bytes(disk.probe_bytes)} probe{fs})"))
    space = ("" if plan.space_bytes == plan.free_bytes else
             f" (judged against a budget of {human_bytes(plan.space_bytes)})")
    lines.append(("free", f"{human_bytes(plan.free_bytes)} at {plan.folder}{space}"))
    lines.append(("memory", "unknown" if plan.memory_bytes is None else f"{human_bytes(plan.memory_bytes)} available"))
    if plan.storage_dtype_reason:
        lines.append(("storage dtype", plan.storage_dtype_reason))
    if plan.quality is not None:
        headed = [q.name for q in plan.quality.choices if q.head]
        heads = (f" and a {plan.quality.head_epochs}-epoch head on {', '.join(headed)}" if headed else
                 " (no head: no lossy choice was asked about)")
        lines.append(("quality", f"{plan.quality.sample}; probes per choice{heads} against float32, "
                                 f"{human_seconds(plan.quality.seconds)}"))
    return lines
