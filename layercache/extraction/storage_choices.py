"""The ways a cache can be stored, priced in bytes: what ``layercache plan`` and the disk refusal list.

Each :class:`StorageChoice` is a store (token states, pooled vectors only, or no cache at all), a
storage codec and, optionally, a projection of every state to ``K`` of its ``D`` dimensions. Its
bytes are :func:`~.estimate.estimate_bytes` of the manifest that choice would write (the run's own
manifest with the store, dtype and width replaced), so chunk padding, HDF5 metadata and the
codec's scales are counted exactly as for the run itself; a projection adds its basis file (per
state a ``K x D`` basis and a ``D`` mean, float32).

Nothing here measures time: :mod:`.pricing` adds the timings to the rows this module sizes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..core.option_names import flag, option, options
from ..core.units import human_bytes, human_seconds
from ..store.manifest import Manifest
from ..store.storage import codec, codec_names, pooled_dtype_for
from .estimate import DISK_MARGIN, estimate_bytes, projection_bytes
from .plan import SplitPlan

NO_CACHE, TOKENS, POOLED = "none", "tokens", "pooled"
PROJECTION_DIVISORS = (2, 4, 8)
"""The projection widths always priced: ``D/2``, ``D/4`` and ``D/8`` (a user's ``--project K`` is added)."""


@dataclass(frozen=True)
class StorageChoice:
    """One way to store (or not store) the states: a row of the plan."""

    store: str
    """``tokens``, ``pooled`` or ``none`` (no cache: recompute the states every epoch)."""
    dtype: str | None = None
    """The storage codec (``float16``, ``int8``, ...); None without a cache."""
    project: int | None = None
    """Each state projected to this many dimensions before it is stored; None keeps the model's width."""

    @property
    def name(self) -> str:
        """``tokens float16``, ``tokens int8 + project 256``, ``pooled float16``, ``no cache``."""
        if self.store == NO_CACHE:
            return "no cache"
        return f"{self.store} {self.dtype}" + (f" + project {self.project}" if self.project else "")

    @property
    def lossy(self) -> bool:
        """Whether the stored states lose what a learner may feel: a scaled integer codec (int8, int4) or a
        projection. float16 and bfloat16 keep each value to 2^-11 and 2^-8 of itself: no probe of
        ``benchmarks/choice_quality.py`` lost anything on them."""
        return bool(self.project) or (self.dtype is not None and codec(self.dtype).scaled)

    @property
    def keywords(self) -> dict:
        """The extract keywords that ask for this choice (``project`` is priced, not built yet); none for no cache."""
        if self.store == NO_CACHE:
            return {}
        return {"store": self.store, "storage_dtype": self.dtype, **({"project": self.project} if self.project else {})}

    @property
    def flags(self) -> str:
        """The extract flags that ask for this choice (``--store tokens --storage-dtype int8``), what the plan's
        JSON records whoever asked."""
        if self.store == NO_CACHE:
            return "(train with the backbone in the loop)"
        return " ".join(flag(keyword, value) for keyword, value in self.keywords.items())


@dataclass
class PricedChoice:
    """A :class:`StorageChoice` with its size and, once measured (:mod:`.pricing`), its timings."""

    choice: StorageChoice
    bytes: int
    """The whole cache on disk (every split, the basis of a projection, the manifest)."""
    epoch_bytes: int
    """What one epoch reads: the epoch split's shards (pooled vectors only for a pooled cache)."""
    fits: bool
    """``bytes`` times the disk margin is at most the space the plan judges against."""
    yours: bool = False
    """The choice the given options make."""
    notes: list[str] = field(default_factory=list)
    epoch_in_memory: bool | None = None
    """Whether one epoch's bytes fit in the memory available (then read at memory speed after the first)."""
    extraction_s: float | None = None
    """Forward passes over every split plus writing the bytes; 0 for no cache; None when not measured."""
    epoch_read_s: float | None = None
    """One epoch's states read from disk (cold); None for no cache or when not measured."""
    recompute_s: float | None = None
    """One epoch's states computed by the backbone instead; None when not measured."""
    shared_s: float = 0.0
    """Forward time a run without a cache spends too, once: the splits other than the epoch's (evaluation)."""

    @property
    def name(self) -> str:
        """The choice's name (see :attr:`StorageChoice.name`)."""
        return self.choice.name

    @property
    def breakeven_epochs(self) -> float | None:
        """Epochs after which the cache has cost less than recomputing: (extraction - shared) / (recompute - read).

        Over ``E`` epochs the cache costs ``extraction + E x read`` and recomputing costs
        ``shared + E x recompute`` (the other splits are run once either way). ``inf`` when reading
        an epoch is not faster than recomputing it (the cache never pays), None for no cache or when
        not measured.
        """
        if self.choice.store == NO_CACHE or None in (self.extraction_s, self.epoch_read_s, self.recompute_s):
            return None
        saved = self.recompute_s - self.epoch_read_s
        return math.inf if saved <= 0 else max(self.extraction_s - self.shared_s, 0.0) / saved

    @property
    def pays_after(self) -> int | None:
        """The first whole epoch count at which the cache has cost less than recomputing (``breakeven`` < E);
        None when it never pays, for no cache, or when not measured."""
        breakeven = self.breakeven_epochs
        if breakeven is None or math.isinf(breakeven):
            return None
        return math.floor(breakeven) + 1

    def to_json(self) -> dict:
        """The row as plain JSON (``pays_after_epochs`` null when it never pays; timings null when not measured)."""
        breakeven = self.breakeven_epochs
        return {"name": self.name, "store": self.choice.store, "dtype": self.choice.dtype,
                "project": self.choice.project, "flags": self.choice.flags, "bytes": self.bytes,
                "epoch_bytes": self.epoch_bytes, "fits": self.fits, "yours": self.yours,
                "extraction_seconds": self.extraction_s, "epoch_read_seconds": self.epoch_read_s,
                "recompute_seconds": self.recompute_s, "shared_seconds": self.shared_s,
                "breakeven_epochs": None if breakeven is None or math.isinf(breakeven) else breakeven,
                "pays": None if breakeven is None else not math.isinf(breakeven),
                "pays_after_epochs": self.pays_after, "epoch_in_memory": self.epoch_in_memory,
                "notes": list(self.notes)}


def projection_sizes(hidden_size: int, extra: int | None = None) -> list[int]:
    """The projection widths priced: D/2, D/4, D/8 (at least 1) and ``extra`` (a ``--project K``), widest first."""
    sizes = {max(hidden_size // d, 1) for d in PROJECTION_DIVISORS}
    if extra:
        sizes.add(int(extra))
    return sorted(sizes, reverse=True)


def standard_choices(manifest: Manifest, yours: StorageChoice | None = None,
                     project: int | None = None) -> list[StorageChoice]:
    """tokens float16, tokens bfloat16, tokens int8, tokens int8 + project K (each of :func:`projection_sizes`),
    the same for int4 (the widths it can store), pooled float16, no cache; and ``yours`` where it is none of them
    (after the token rows)."""
    widths = [None, *projection_sizes(manifest.model.hidden_size, project)]  # the model's, then each projection
    rows = [StorageChoice(TOKENS, "float16"), StorageChoice(TOKENS, "bfloat16")]
    rows += [StorageChoice(TOKENS, dtype, k) for dtype in ("int8", "int4") for k in widths]
    rows += [StorageChoice(POOLED, "float16"), StorageChoice(NO_CACHE)]
    known = set(codec_names())
    rows = [row for row in rows if row.dtype is None or row.dtype in known  # a codec this layercache has, at a
            and codec(row.dtype).width_problem(row.project or manifest.model.hidden_size) is None]  # width it stores
    if yours is not None and yours not in rows:
        rows.insert(len(rows) - 2, yours)
    return rows


def choice_manifest(manifest: Manifest, choice: StorageChoice) -> Manifest:
    """The manifest ``choice`` would write: the run's, with the store, codec and projection replaced (states
    ``K`` wide under ``--project K``; the basis file is added by :func:`choice_bytes`)."""
    pooling = list(manifest.storage.pooling) or ["mean"]
    storage = dataclasses.replace(manifest.storage, store=choice.store, dtype=choice.dtype,
                                  pooling=pooling if choice.store == POOLED else list(manifest.storage.pooling),
                                  project=int(choice.project) if choice.project else None,
                                  pooled_dtype=pooled_dtype_for(choice.dtype, choice.store))
    return dataclasses.replace(manifest, storage=storage)


def choice_bytes(manifest: Manifest, plans: dict[str, SplitPlan] | None, choice: StorageChoice,
                 split: str | None = None) -> int:
    """Bytes ``choice`` takes on disk: every split (or only ``split``), plus a projection's basis file."""
    if choice.store == NO_CACHE:
        return 0
    priced = choice_manifest(manifest, choice)
    if split is not None:
        priced = dataclasses.replace(priced, splits={split: priced.splits[split]})
        plans = {split: plans[split]} if plans and split in plans else None
    return estimate_bytes(priced, plans)  # a projection's basis file included


def epoch_split(manifest: Manifest) -> str | None:
    """The split an epoch reads: ``train`` when there is one, else the split with the most tokens."""
    if "train" in manifest.splits:
        return "train"
    return max(manifest.splits, key=lambda n: manifest.splits[n].n_tokens, default=None)


def your_choice(manifest: Manifest, project: int | None = None) -> StorageChoice:
    """The choice the run's manifest makes (its store, its resolved codec, its projection), or with ``project``."""
    return StorageChoice(manifest.storage.store, manifest.storage.dtype,
                         project or manifest.storage.project or None)


def size_choices(manifest: Manifest, plans: dict[str, SplitPlan] | None, space: int,
                 choices: Sequence[StorageChoice], yours: StorageChoice) -> list[PricedChoice]:
    """Each choice's bytes, the bytes one epoch reads, and whether it fits ``space`` (with the disk margin)."""
    split = epoch_split(manifest)
    token_tasks = [t.name for t in manifest.tasks if t.kind == "token"]
    rows = []
    for choice in choices:
        size = choice_bytes(manifest, plans, choice)
        epoch = choice_bytes(manifest, plans, choice, split) if split is not None else 0
        rows.append(PricedChoice(choice, size, epoch, size * DISK_MARGIN <= space, yours=choice == yours,
                                 notes=_notes(manifest, choice, token_tasks)))
    return rows


def _notes(manifest: Manifest, choice: StorageChoice, token_tasks: list[str]) -> list[str]:
    """What a choice gives up or assumes, in words."""
    if choice.store == NO_CACHE:
        return ["the backbone runs every epoch; nothing is written"]
    notes = []
    if choice.store == POOLED:
        modes = ", ".join(list(manifest.storage.pooling) or ["mean"])
        dropped = f"the token tasks ({', '.join(token_tasks)}) and " if token_tasks else ""
        notes.append(f"no token states, {modes} vectors only: drops {dropped}every mixer or head that reads each "
                     f"token (heads read pooled vectors, {option('source', 'pooled:<mode>')})")
    if choice.dtype == "int8" and not choice.project:
        notes.append("one float32 scale per vector; values within 0.4 % of each vector's largest; "
                     "pooled vectors float16")
    if choice.dtype == "int4" and not choice.project:
        notes.append("one bfloat16 scale per 32 values; values within 1/14 (7 %) of their group's largest; "
                     "pooled vectors float16")
    if choice.project:
        width = manifest.model.hidden_size
        basis = human_bytes(projection_bytes(choice_manifest(manifest, choice)))
        notes.append(f"each state projected {width} -> {choice.project} (basis file {basis})")
    return notes


# --- the recommendation ------------------------------------------------------------------------------
def _fidelity(row: PricedChoice, preferred16: str) -> tuple:
    """Sort key, most faithful first: token states, full width (wider first), more bytes per value, auto's 16-bit."""
    choice = row.choice
    store_rank = {TOKENS: 0, POOLED: 1}.get(choice.store, 2)
    if choice.store == NO_CACHE:
        return (store_rank,)
    return (store_rank, -(choice.project or math.inf), -codec(choice.dtype).bytes_per_value,
            0 if choice.dtype == preferred16 else 1)


def recommend(rows: Sequence[PricedChoice], space: int, preferred16: str = "float16") -> tuple[PricedChoice, str]:
    """The most faithful row that fits and pays (or is not timed), and the recommendation in words.

    No cache when no row fits, or none that fits pays. The user's row (``yours``) is named when it
    differs, and left as it is.
    """
    caches = [r for r in rows if r.choice.store != NO_CACHE]
    fitting = [r for r in caches if r.fits]
    paying = [r for r in fitting if r.breakeven_epochs is None or not math.isinf(r.breakeven_epochs)]
    if paying:
        best = min(paying, key=lambda r: _fidelity(r, preferred16))
        text = (f"Recommended: {best.name} ({human_bytes(best.bytes)}): the most faithful choice that fits "
                f"{human_bytes(space)}{_paying(best)}.")
    else:
        best = next(r for r in rows if r.choice.store == NO_CACHE)
        reason = (f"no cache fits {human_bytes(space)}" if not fitting else
                  "for every cache that fits, reading an epoch is not faster than recomputing it")
        text = f"Recommended: no cache: {reason}."
    yours = next((r for r in rows if r.yours), None)
    if yours is not None and yours is not best:
        state = "fits" if yours.fits else "does not fit"
        if yours.choice.store != NO_CACHE and yours.breakeven_epochs is not None:
            state += ", never pays" if math.isinf(yours.breakeven_epochs) else _paying(yours).replace(" and", ",")
        text += (f" Your choice, {yours.name} ({human_bytes(yours.bytes)}), {state}; it is kept as given"
                 + (f": pass {options(**best.choice.keywords)} to change it." if best.choice.store != NO_CACHE
                    else "."))
    elif yours is not None:
        text += " It is your choice."
    return best, text


def _paying(row: PricedChoice) -> str:
    """`` and pays after 2 epochs``, or `` (timings not measured)``."""
    n = row.pays_after
    return " (timings not measured)" if n is None else f" and pays after {n} epoch{'s' if n != 1 else ''}"


# --- the table, as plain text (the disk refusal) and as cells (the command renders them) ------------------------
HEADERS = ("choice", "size", "fits", "extraction", "epoch read", "recompute", "pays after")
SIZE_HEADERS = ("choice", "size", "fits")


def choice_cells(row: PricedChoice, timed: bool = True) -> list[str]:
    """One row's cells under :data:`HEADERS` (:data:`SIZE_HEADERS` when not ``timed``); the user's choice is starred."""
    name = row.name + (" *" if row.yours else "")
    size = "0" if row.choice.store == NO_CACHE else human_bytes(row.bytes)
    fits = "yes" if row.fits else "no"
    if not timed:
        return [name, size, fits]
    return [name, size, fits, _seconds(row.extraction_s), _seconds(row.epoch_read_s), _seconds(row.recompute_s),
            pays_text(row)]


def pays_text(row: PricedChoice) -> str:
    """``2 epochs``, ``never`` (reading is not faster than recomputing), ``-`` (no cache) or ``not measured``."""
    if row.choice.store == NO_CACHE:
        return "-"
    breakeven = row.breakeven_epochs
    if breakeven is None:
        return "not measured"
    if math.isinf(breakeven):
        return "never"
    n = row.pays_after
    return f"{n} epoch{'s' if n != 1 else ''}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else human_seconds(value)


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded with spaces, a rule under the headers: a table a one-sentence error can carry."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def sizes_text(rows: Sequence[PricedChoice], space: int) -> str:
    """The sized rows as a plain table, for the disk refusal (timings: not measured)."""
    table = plain_table(SIZE_HEADERS, [choice_cells(r, timed=False) for r in rows])
    return (f"{table}\n(* your choice; fits: size x {DISK_MARGIN} <= {human_bytes(space)}; extraction and read "
            "times not measured: `layercache plan` with the same arguments measures them)")
