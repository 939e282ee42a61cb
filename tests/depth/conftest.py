"""Fixtures the depth tests share: tiny decoder caches for the lenses (the tuned lens's tests, and its devices' and
logits dtypes')."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_logit_lens import causal_lm_caches


@pytest.fixture(scope="package")
def decoder_caches(tmp_path_factory) -> dict[str, Path]:
    """A float32 cache of 41 texts per decoder kind (GPT-2: LayerNorm, tied head; Llama: RMSNorm, own head)."""
    return causal_lm_caches(tmp_path_factory.mktemp("tuned"), ("gpt2", "llama"), texts=41, batch_size=8)
