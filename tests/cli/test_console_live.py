"""verify's and predict's tables at 80 columns: every header and value whole."""

from __future__ import annotations

import pytest
from console_support import assert_readable, narrow

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # torch on one thread, as in tests/live and tests/report


def test_verify_and_predictions_tables_at_80_columns(runs, live_caches):
    from layercache.cli.live import render_predictions, render_verify
    from layercache.live import LiveBundle, verify_cache

    result = verify_cache(live_caches["bert"], sample=3)
    console = narrow()
    render_verify(result, console)
    text = console.export_text()
    assert_readable(text)
    for header in ("|diff|", "rms", "worst /", "tolerance", "verdict", "embeddings", "layer_2"):
        assert header in text, header
    bundle = LiveBundle.from_runs([runs["bert"][name] for name in ("topic", "scope", "intensity", "sentiment")])
    predictions = bundle.predict(["the film was not good at all and the keys are bad today", "a fine day"])
    console = narrow()
    render_predictions(predictions, console)
    text = console.export_text()
    assert_readable(text)
    assert text.count("the film") >= 1 and "intensity" in text


