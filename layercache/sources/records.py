"""In-memory records of a dataset, the common shape every data source is turned into.

A source (hub dataset, local file, CoNLL file, built-in generated task) becomes a
:class:`DatasetRecords`: per split, columnar lists of texts (or pre-split words) and one
label list per :class:`LabelTask`. Extraction and the cache only ever see this shape, so adding
a source never touches the extractor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.tasks import TASK_KINDS, LabelTask, TaskKind

__all__ = ["TASK_KINDS", "LabelTask", "TaskKind", "SplitRecords", "DatasetRecords"]

@dataclass
class SplitRecords:
    """One split, columnar. Exactly one of ``texts`` / ``words`` is the model input.

    - ``texts``: raw strings (``text_pairs`` holds the second sentence of a pair task, or ``None``).
    - ``words``: pre-split words, tokenized with ``is_split_into_words`` so word ids are known;
      required by token tasks.
    - ``labels``: task name -> one entry per example (an ``int``/``float``, or a ``list[int]`` with
      one class id per word for token tasks).
    - ``source_index``: the row of each example in the source split (kept in the cache).
    - ``n_skipped_empty``: source rows left out because their text (or word list) was empty.
    """

    texts: list[str] | None = None
    text_pairs: list[str] | None = None
    words: list[list[str]] | None = None
    labels: dict[str, list] = field(default_factory=dict)
    source_index: list[int] | None = None
    n_skipped_empty: int = 0

    def __post_init__(self) -> None:
        if (self.texts is None) == (self.words is None):
            raise ValueError("SplitRecords needs exactly one of texts or words")
        n = len(self)
        if self.source_index is None:
            self.source_index = list(range(n))
        for name, column in [("text_pairs", self.text_pairs), ("source_index", self.source_index),
                             *[(f"labels[{k}]", v) for k, v in self.labels.items()]]:
            if column is not None and len(column) != n:
                raise ValueError(f"{name} has {len(column)} entries for {n} examples")

    def __len__(self) -> int:
        return len(self.texts if self.texts is not None else self.words)


@dataclass
class DatasetRecords:
    """A whole dataset: provenance, label tasks and the splits to extract."""

    name: str
    """How the user named it: a hub id, a file path, or ``builtin``."""
    splits: dict[str, SplitRecords]
    tasks: list[LabelTask] = field(default_factory=list)
    config: str | None = None
    fingerprint: str = ""
    """A hash of the content (file bytes, hub fingerprint, generator seed) so a cache can tell data apart."""
    columns: list[str] = field(default_factory=list)
    """All columns the source had, for messages and the manifest."""
    text_columns: list[str] = field(default_factory=list)
    """The column(s) used as model input (two for sentence pairs)."""
    files: dict[str, str] = field(default_factory=dict)
    """Local sources: the file each split was read from (empty for the hub and the built-in set)."""

    def task(self, name: str) -> LabelTask:
        """The label task called ``name``."""
        for task in self.tasks:
            if task.name == name:
                return task
        raise KeyError(name)
