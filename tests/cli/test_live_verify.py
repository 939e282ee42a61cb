"""``layercache verify``: its table and JSON, exit code 1 with the failing rows for an edited cache, one sentence
(exit code 2) on a user error. What verify_cache finds is tested in tests/live/test_verify.py; the caches and runs
are the root conftest's."""

from __future__ import annotations

import json

import pytest
from cli_support import invoke

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # torch on one thread, as in tests/live


def test_an_edited_cache_fails_naming_split_row_and_state(edited_cache):
    out = invoke("verify", edited_cache, "--sample", "5")
    assert out.exit_code == 1, out.output
    assert "Traceback" not in out.output and "Verification failed" in out.output
    assert "FAIL" in out.output and "layer_2" in out.output


def test_cli_table_json_and_user_errors(live_caches, runs, tmp_path):
    out = invoke("verify", live_caches["bert"], "--sample", "4", "--split", "validation")
    assert out.exit_code == 0, out.output
    assert "layer_1" in out.output and "passed" in out.output

    out = invoke("verify", live_caches["bert"], "--sample", "4", "--json", "--run", runs["bert"]["topic"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output[out.output.index("{"):])  # after any note on stderr
    assert data["passed"] and data["examples"] == {"train": 4, "validation": 4}
    assert data["parity"]["agreement"] == 1.0

    missing = invoke("verify", tmp_path / "nowhere")
    assert missing.exit_code == 2 and "Traceback" not in missing.output
    bad = invoke("verify", live_caches["bert"], "--sample", "0")
    assert bad.exit_code == 2 and "--sample" in bad.output
    split = invoke("verify", live_caches["bert"], "--split", "nope")
    assert split.exit_code == 2 and "Traceback" not in split.output
