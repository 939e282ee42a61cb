"""Minibatches computed by the frozen backbone on the fly: the live counterpart of a cache feed.

A :class:`LiveFeed` serves one split of a dataset exactly as :class:`~layercache.store.cache_feed.CacheFeed`
serves it from a cache, but every batch costs a backbone forward pass (the way adalayers and most
probing code train a head). It exists to measure what the cache saves and to check that nothing
is lost: a head trained on a cache can be scored on a ``LiveFeed`` and vice versa.

It yields the same token positions as the cache would hold, because it reuses the extraction's
own steps: :func:`~layercache.extraction.tokenize.encode_split` (same truncation, same windows with
``stride``, word ids ``-1`` on special tokens), :func:`~layercache.extraction.forward.pad_windows`
and :func:`~layercache.extraction.forward.token_index` (the stored tokens: real positions only,
windows stitched back), then the batch layout every feed shares (:mod:`layercache.store.batches`):
``(B, T, S, D)`` float32 states padded on the right, padded positions repeating the row's first
token, labels on the first sub-token of each word. It is a :class:`~layercache.store.feed.Feed`,
so the trainer and evaluation take it wherever they take a cache feed.

Rows are numbered like the records of the split (row ``i`` = ``records.splits[split]`` example
``i``), or like a cache's rows with :meth:`LiveFeed.matching_cache`, so that the rows of a cache
feed and of a live feed name the same examples::

    backbone = load_backbone("minilm", words_input=True)
    records = load_dataset_records(None, split_files={"train": ..., "validation": ...})
    train = LiveFeed(backbone, records, "train", tasks=["label"], batch_size=32)
    val = LiveFeed(backbone, records, "validation", tasks=["label"], batch_size=128)
    history = train_model(model, train, val, TrainConfig(epochs=3))

Shuffled epochs draw batches in a seeded random order from a random permutation of the rows, each
batch padded to its longest example (the usual live setup; ``bucket_batches`` sorts buckets of
batches by length, as the cache feed does, to cut padding). Unshuffled passes sort the rows by
length, so evaluation pads little.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from ..backbone.loader import Backbone
from ..backbone.placement import tokens_of
from ..core.tasks import find_task
from ..errors import CacheMismatchError, ConfigError, DatasetError
from ..extraction.forward import pad_windows, token_index
from ..extraction.tokenize import EncodedExample, encode_split
from ..sources.records import DatasetRecords, LabelTask, SplitRecords
from ..store.batches import CacheBatch, consecutive_starts, example_labels, first_subtoken_labels, padded_positions
from ..store.projection import Projection
from ..store.reader import LayerCache, state_positions
from ..store.storage import check_storage_dtype, codec


class LiveFeed:
    """Padded minibatches of one dataset split, computed by a frozen backbone for every batch.

    Args:
        backbone: the frozen model (:func:`~layercache.backbone.loader.load_backbone`; load it with
            ``words_input=True`` for pre-split words, as extraction does).
        records: the dataset (:func:`~layercache.sources.datasets.load_dataset_records`).
        split: the split of ``records`` to serve.
        tasks: label tasks to attach (names, or :class:`LabelTask` objects of ``records``); ``[]`` for
            unlabelled prediction.
        rows: the feed rows to serve (default: all), e.g. a training subset without a validation slice.
        layers: states to compute (names like ``"layer_3"`` or indexes among the backbone's
            ``embeddings, layer_1 … layer_L``, negative from the end), in the order given; default all.
        batch_size: examples per batch.
        stride: window the examples longer than the backbone's maximum length with this overlap,
            as ``extract(..., stride=)`` does (default: truncate).
        row_order: ``(n,)`` record position of each feed row (default: the records' order);
            :meth:`matching_cache` sets it to the cache's row order.
        encoded: the records already tokenized (one per record, in record order), instead of
            tokenizing them here; :meth:`from_cache_tokens` passes the cache's own.
        storage_dtype: round the states through ``float16`` / ``bfloat16`` (as a cache stores them)
            before handing them out; default: keep the forward pass's values (float32).
        bucket_batches: with ``shuffle``, sort groups of this many batches by length before
            shuffling the batches (0, the default: purely random batches).

    Attributes:
        forward_seconds: wall time spent in the backbone forward pass so far (all epochs).
        padded_tokens, real_tokens: forward-pass positions computed so far, and the real ones among them.
    """

    def __init__(self, backbone: Backbone, records: DatasetRecords, split: str, *,
                 tasks: Sequence[str | LabelTask] = (), rows: Sequence[int] | None = None, layers=None,
                 batch_size: int = 32, stride: int | None = None, row_order: Sequence[int] | None = None,
                 storage_dtype: str | None = None, bucket_batches: int = 0,
                 encoded: Sequence[EncodedExample] | None = None, projection: Projection | None = None) -> None:
        if batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, got {batch_size}.")
        if bucket_batches < 0:
            raise ConfigError(f"bucket_batches must be 0 (random batches) or more, got {bucket_batches}.")
        if split not in records.splits:
            raise ConfigError(f"The dataset has no split {split!r}; its splits are: {', '.join(records.splits)}.")
        if storage_dtype is not None:
            check_storage_dtype(storage_dtype)
        self.backbone, self.records, self.split = backbone, records, split
        self.split_records = records.splits[split]
        self.batch_size, self.bucket_batches = batch_size, bucket_batches
        self.storage_dtype = storage_dtype
        self.projection = projection  # a projected cache's basis, in this feed's state order
        self.index = state_positions(layers, backbone.layer_names, "the backbone")
        self.layer_names = [backbone.layer_names[i] for i in self.index]
        self.task_specs = [_resolve_task(records, t) for t in tasks]
        self.tasks = [t.name for t in self.task_specs]
        self.kinds = {t.name: t.kind for t in self.task_specs}
        for task in self.tasks:
            if task not in self.split_records.labels:
                raise ConfigError(f"Split {split!r} holds no labels for task {task!r}.")

        n_records = len(self.split_records)
        order = np.arange(n_records) if row_order is None else np.asarray(row_order, dtype=np.int64)
        if order.ndim != 1 or len(order) == 0 or order.min() < 0 or order.max() >= n_records:
            raise ConfigError(f"row_order must list record positions in [0, {n_records}) of split {split!r}.")
        self.row_order = order  # (n,) feed row -> record position
        n = len(order)
        self.rows = np.arange(n) if rows is None else np.unique(np.asarray(rows, dtype=np.int64))
        if len(self.rows) == 0:
            raise ConfigError(f"No examples to read from split {split!r}.")
        if self.rows[0] < 0 or self.rows[-1] >= n:
            raise ConfigError(f"rows must lie in [0, {n}) for split {split!r}.")

        # Tokenize once, exactly as extraction does. Every record is encoded (cheap next to one
        # forward pass) so that record positions line up with encode_split's rows.
        if encoded is None:
            encoded = list(encode_split(backbone.tokenizer, self.split_records, max_length=backbone.max_length,
                                        stride=stride, causal=backbone.is_causal))
        elif len(encoded) != n_records:
            raise ConfigError(f"encoded has {len(encoded)} examples for the {n_records} records of split {split!r}.")
        self._encoded: list[EncodedExample] = [encoded[p] for p in order]  # by feed row
        self.lengths = np.array([ex.n_tokens for ex in self._encoded], dtype=np.int64)  # (n,) stored tokens
        self._has_words = all(ex.word_ids is not None for ex in self._encoded)
        if any(k == "token" for k in self.kinds.values()) and not self._has_words:
            raise DatasetError("Token tasks need word ids, but this split's text is not split into words "
                               "(sentence pairs or raw text); use a word-level dataset.")
        self._labels = {t: [self.split_records.labels[t][p] for p in order] for t in self.tasks}  # by feed row
        self.forward_seconds = 0.0
        self.padded_tokens = 0
        self.real_tokens = 0

    @classmethod
    def matching_cache(cls, cache: LayerCache, split: str, backbone: Backbone, records: DatasetRecords, *,
                       tasks: Sequence[str | LabelTask] | None = None, layers=None, **options) -> "LiveFeed":
        """A live feed whose rows, states and tokens are those of ``cache``'s ``split``.

        The backbone and tokenizer must be the ones the cache was extracted with (fingerprints and
        maximum length are checked), ``records`` the same data (every cache row's source example
        must be in it). Rows are numbered as in the cache, states default to the cache's kept
        states, ``stride`` is the cache's, and ``tasks`` default to the cache's tasks.
        """
        m = cache.manifest
        checks = (("weights", m.model.fingerprint, backbone.fingerprint),
                  ("tokenizer", m.tokenizer.fingerprint, backbone.tokenizer_fingerprint),
                  ("maximum length", m.tokenizer.max_length, backbone.max_length))
        for what, theirs, mine in checks:
            if theirs != mine:
                raise CacheMismatchError(
                    f"The backbone {backbone.name!r} has a different {what} than the one that extracted the cache "
                    f"{cache.path} ({m.model.name!r}); load that backbone (with the cache's max length).")
        if split not in records.splits:
            raise ConfigError(f"The dataset has no split {split!r}; its splits are: {', '.join(records.splits)}.")
        position = {int(s): i for i, s in enumerate(records.splits[split].source_index)}
        example_index = cache.example_index(split)  # (n,) source row of each cache row
        missing = [int(e) for e in example_index if int(e) not in position]
        if missing:
            raise DatasetError(f"The records of split {split!r} lack {len(missing)} example(s) of the cache "
                               f"(source row {missing[0]} first); load the same data with the same limit.")
        order = np.array([position[int(e)] for e in example_index], dtype=np.int64)
        if tasks is None:
            tasks = [t.name for t in cache.tasks]
        return cls(backbone, records, split, tasks=tasks, layers=cache.layer_names if layers is None else layers,
                   stride=m.tokenizer.stride, row_order=order, **options)

    @classmethod
    def from_cache_tokens(cls, cache: LayerCache, split: str, backbone: Backbone, *,
                          tasks: Sequence[str | LabelTask] | None = None, layers=None, **options) -> "LiveFeed":
        """A live feed of ``cache``'s ``split`` that needs no dataset: the inputs are the cache's stored token ids.

        Each row runs exactly what extraction ran (:func:`~layercache.live.cached_inputs.cached_examples`:
        the stored ids, windows rebuilt with the cache's stride); labels come from the cache. No
        stored state is read. The backbone must be the cache's (weights and tokenizer fingerprints).
        """
        from .cached_inputs import cached_examples
        from .verify import check_backbone

        check_backbone(cache, backbone)
        cache.require_split(split)
        n = cache.num_examples(split)
        task_specs = list(cache.tasks)
        labels = {}
        for t in task_specs:
            values = cache.labels(split, t.name)
            labels[t.name] = [np.asarray(v).tolist() for v in values] if t.kind == "token" else values.tolist()
        split_records = SplitRecords(texts=[""] * n, labels=labels,
                                     source_index=cache.example_index(split).tolist())
        records = DatasetRecords(name=cache.manifest.dataset.name, splits={split: split_records}, tasks=task_specs)
        encoded = cached_examples(cache, split, range(n), backbone.tokenizer, causal=backbone.is_causal)
        layers = cache.layer_names if layers is None else layers
        projection = cache.projection()  # a projected cache: its basis, for the states this feed computes
        if projection is not None:
            projection = projection.subset(cache.layer_index(layers))
        return cls(backbone, records, split, tasks=[t.name for t in task_specs] if tasks is None else tasks,
                   layers=layers, encoded=encoded, projection=projection, **options)

    # --- the Feed protocol (layercache.store.feed) --------------------------------------------
    @property
    def n_examples(self) -> int:
        """Examples served per epoch."""
        return len(self.rows)

    def __len__(self) -> int:
        """Batches per epoch."""
        return -(-len(self.rows) // self.batch_size)

    def epoch(self, shuffle: bool = False, seed: int = 0) -> Iterator[CacheBatch]:
        """One pass over the rows, one backbone forward per batch; ``shuffle``: a seeded random order."""
        for rows in self.plan(shuffle, seed):
            yield self.batch(rows)

    def plan(self, shuffle: bool = False, seed: int = 0) -> list[np.ndarray]:
        """The rows of each batch of one epoch, in the order they are served."""
        size = self.batch_size
        if not shuffle:
            rows = self.rows[np.argsort(self.lengths[self.rows], kind="stable")]  # least padding
            return [rows[i:i + size] for i in range(0, len(rows), size)]
        rng = np.random.default_rng(seed)
        rows = rng.permutation(self.rows)
        if not self.bucket_batches:
            return [rows[i:i + size] for i in range(0, len(rows), size)]
        batches, bucket = [], size * self.bucket_batches
        for i in range(0, len(rows), bucket):
            chunk = rows[i:i + bucket]
            chunk = chunk[np.argsort(self.lengths[chunk], kind="stable")]
            batches.extend(chunk[j:j + size] for j in range(0, len(chunk), size))
        return [batches[i] for i in rng.permutation(len(batches))]

    def batch(self, rows: Sequence[int]) -> CacheBatch:
        """Run the backbone on the given feed rows and return them as one padded float32 batch.

        ``states`` stay on the backbone's device; mask, word ids and labels are CPU tensors.
        """
        rows = np.asarray(rows, dtype=np.int64)
        examples = [self._encoded[r] for r in rows]
        lengths = self.lengths[rows]  # (B,)
        ids, attn = pad_windows(examples, self.backbone.tokenizer.pad_token_id)  # (R, W) each
        started = time.perf_counter()
        hidden = self.backbone.hidden_states(ids, attn)  # L+1 x (R, W, D), inference tensors
        if hidden[0].device.type == "cuda":
            torch.cuda.synchronize(hidden[0].device)
        self.forward_seconds += time.perf_counter() - started
        self.padded_tokens += int(attn.numel())
        self.real_tokens += int(attn.sum())
        with torch.no_grad():
            # Cache layout: row after row, each row's stored tokens (windows stitched), padded on the
            # right with the row's first token.
            at = padded_positions(consecutive_starts(lengths), lengths)  # (B, T) stored token of each position
            device = self.backbone.device  # a split model's states lie where their blocks ran: gathered here
            where = token_index(examples, attn)[torch.from_numpy(at.token)].reshape(-1)  # (B * T,) in R * W
            states = torch.stack([tokens_of(hidden[i], where, device) for i in self.index], dim=1)  # (B * T, S, D)
            states = states.reshape(*at.token.shape, *states.shape[1:])  # (B, T, S, D)
            if self.projection is not None:  # as a projected cache stores them: (B, T, S, K)
                states = self.projection.apply(states)
            if self.storage_dtype is not None:
                states = codec(self.storage_dtype).round(states)
            states = states.float()
            if states.is_inference():  # plain tensors only: a head's autograd must be able to save them
                states = states.clone()
        mask = at.mask  # (B, T)
        word_ids = None
        if self._has_words:
            wid = np.concatenate([ex.word_ids for ex in examples]).astype(np.int64)  # (t,)
            word_ids = at.word_ids(wid)  # (B, T), -1 on specials and padding
        labels = {}
        for task in self.tasks:
            if self.kinds[task] == "token":
                labels[task] = self._token_labels(task, rows, word_ids)
            else:
                labels[task] = example_labels(np.array([self._labels[task][r] for r in rows]), self.kinds[task])  # (B,)
        return CacheBatch(states=states, mask=mask, rows=rows, labels=labels, word_ids=word_ids)

    def _token_labels(self, task: str, rows: np.ndarray, word_ids: torch.Tensor) -> torch.Tensor:
        """(B, T) word labels on the first sub-token of each word, IGNORE_INDEX elsewhere."""
        words = [np.asarray(self._labels[task][r], dtype=np.int64) for r in rows]  # (W_i,) per row
        n_words = np.array([len(w) for w in words], dtype=np.int64)  # (B,)
        return first_subtoken_labels(word_ids.numpy(), np.concatenate(words), consecutive_starts(n_words), n_words)

    def n_words(self, rows: np.ndarray) -> np.ndarray:
        """(B,) words per row (token tasks); words cut off at the maximum length count too."""
        task = next((t for t in self.tasks if self.kinds[t] == "token"), None)
        if task is not None:
            return np.array([len(self._labels[task][r]) for r in rows], dtype=np.int64)
        words = self.split_records.words
        if words is None:
            raise DatasetError("This split is not split into words, so it has no word counts.")
        return np.array([len(words[self.row_order[r]]) for r in rows], dtype=np.int64)

    def gold(self, task: str) -> np.ndarray | list[np.ndarray]:
        """Labels of ``self.rows`` in row order: an array, or per-word arrays for a token task."""
        if task not in self._labels:
            raise ConfigError(f"This feed carries no labels for task {task!r}; it has: {', '.join(self.tasks)}.")
        if self.kinds[task] == "token":
            return [np.asarray(self._labels[task][r], dtype=np.int64) for r in self.rows]
        dtype = np.float32 if self.kinds[task] == "regression" else np.int64
        return np.array([self._labels[task][r] for r in self.rows], dtype=dtype)

    @property
    def padding_efficiency(self) -> float:
        """Real / padded forward positions computed so far (1.0 before any batch)."""
        return self.real_tokens / self.padded_tokens if self.padded_tokens else 1.0


def _resolve_task(records: DatasetRecords, task: str | LabelTask) -> LabelTask:
    return find_task(records.tasks, task.name if isinstance(task, LabelTask) else task, "The dataset")
