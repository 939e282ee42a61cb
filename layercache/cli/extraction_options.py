"""The options ``extract`` and ``plan`` share, declared once, and the one place they become extraction specs.

``plan`` prices exactly what ``extract`` with the same options would write, so both take the same
data, storage and batching options with the same flags, help and defaults (read from
:mod:`layercache.core.extraction_defaults`), and :func:`extraction_specs` turns them into the same
:class:`~layercache.extraction.specs.DataSpec`, ``StorageSpec`` and ``BatchSpec``.
"""

from __future__ import annotations

from typing import Optional

import typer

from ..core.extraction_defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_BATCH_TOKENS,
    DEFAULT_DATASET,
    DEFAULT_FORWARD_DTYPE,
    DEFAULT_POOLING,
    DEFAULT_SHARD_BYTES,
)
from .choices import choice_help, supported_files
from .parsing import layer_specs, parse_max_memory, parse_size, parse_splits, size_text, split_list

QUALITY_EXAMPLES = 2000
"""planning.sample.DEFAULT_EXAMPLES (the quality sample of plan and extract), not imported: `--help` loads no
model code."""


def model_argument():
    """MODEL: a hub id, the bundled alias or a local model folder."""
    return typer.Argument("minilm", help="Hub id, bundled alias (minilm) or local model folder.")


def dataset_argument():
    """DATASET: builtin, a hub id or a local file."""
    return typer.Argument(None, help=f"{DEFAULT_DATASET} (default), a hub id, or a local file: {supported_files()}.")


def config_option():
    """``--config``: a hub dataset's configuration."""
    return typer.Option(None, "--config", help="Hub dataset config, e.g. cola for glue.")


def split_option(verb: str):
    """``--split``: a hub split, or NAME=PATH for a local file (``verb``: what the command does with it)."""
    return typer.Option(None, "--split", help=f"Split to {verb} (hub), or NAME=PATH for local files; repeatable.")


def text_column_option():
    """``--text-column``."""
    return typer.Option(None, "--text-column", help="Text column (twice for sentence pairs).")


def label_column_option():
    """``--label-column``."""
    return typer.Option(None, "--label-column", help="Label column(s); detected when omitted.")


def task_kind_option(command: str):
    """``--task-kind``: the kind of the label task, when its values leave it open."""
    return typer.Option(None, "--task-kind", help=choice_help(command, "--task-kind", "Override the label kind."))


def limit_option():
    """``--limit``: the first N examples of each split."""
    return typer.Option(None, "--limit", help="Keep the first N examples of each split.")


def layers_option():
    """``--layers``: the states to keep."""
    return typer.Option(None, "--layers",
                        help="States to keep: names or indices (0 = embeddings, -1 = last); comma-separated.")


def pooling_option(command: str):
    """``--pooling``: the pooled vectors to store."""
    return typer.Option(None, "--pooling", help=choice_help(command, "--pooling",
                                                            "Pooled vectors to store; comma-separated."),
                        show_default=", ".join(DEFAULT_POOLING))


def mean_skip_first_option():
    """``--mean-skip-first``."""
    return typer.Option(False, "--mean-skip-first",
                        help="Leave each example's first token (a decoder's BOS / attention sink) out of mean "
                             "pooling, here and in heads.")


def dtype_option(command: str):
    """``--dtype``: the forward pass's dtype."""
    return typer.Option(DEFAULT_FORWARD_DTYPE, "--dtype", help=choice_help(
        command, "--dtype", "Forward-pass dtype.", "auto: float32 on CPU, bfloat16 or float16 on CUDA."))


def max_length_option():
    """``--max-length``: tokens per window."""
    return typer.Option(None, "--max-length", help="Token limit per window.", show_default="the model's")


def stride_option():
    """``--stride``: windows instead of truncation."""
    return typer.Option(None, "--stride",
                        help="Split long texts into windows overlapping by this many tokens instead of truncating.")


def batch_tokens_option():
    """``--batch-tokens``: padded tokens per forward batch."""
    return typer.Option(DEFAULT_BATCH_TOKENS, "--batch-tokens", help="Padded tokens per forward batch.")


def batch_size_option():
    """``--batch-size``: sequences per forward batch."""
    return typer.Option(DEFAULT_BATCH_SIZE, "--batch-size", help="Most sequences per forward batch.")


def shard_size_option():
    """``--shard-size``: bytes of states per shard file."""
    return typer.Option(size_text(DEFAULT_SHARD_BYTES), "--shard-size", help="Target bytes of states per shard file.")


def extraction_specs(*, dataset: Optional[str], config, split, text_column, label_column, no_labels: bool,
                     task_kind, limit, layers, store: str, pooling, storage_dtype: str, mean_skip_first: bool,
                     shard_size: str, project: Optional[int], batch_tokens: int, batch_size: int, max_length, stride,
                     dtype: str, device: str, device_map: Optional[str] = None,
                     max_memory: Optional[list[str]] = None, project_basis: str = "pca",
                     compression: str = "none"):
    """The command line's extraction options as ``(DataSpec, StorageSpec, BatchSpec)``."""
    from ..extraction.specs import BatchSpec, DataSpec, StorageSpec

    splits, split_files = parse_splits(split)
    data = DataSpec(dataset or ("" if split_files else DEFAULT_DATASET), config=config, splits=splits,
                    split_files=split_files, text_columns=split_list(text_column) or None,
                    label_columns=split_list(label_column) or None, no_labels=no_labels, task_kind=task_kind,
                    limit=limit)
    storage = StorageSpec(layers=layer_specs(layers) or None, store=store,
                          pooling=split_list(pooling) or list(DEFAULT_POOLING), storage_dtype=storage_dtype,
                          mean_skip_first=mean_skip_first, shard_bytes=parse_size(shard_size), project=project,
                          project_basis=project_basis, compression=compression)
    batching = BatchSpec(batch_tokens=batch_tokens, batch_size=batch_size, max_length=max_length, stride=stride,
                         dtype=dtype, device=device, device_map=device_map,
                         max_memory=parse_max_memory(max_memory, device_map))
    return data, storage, batching
