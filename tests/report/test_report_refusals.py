"""probe-report on a full disk: one sentence and exit code 2, no traceback, no half-written report (issue 26)."""

from __future__ import annotations

import errno

from cli_support import assert_refused, invoke


def test_probe_report_on_a_full_disk_is_one_sentence(report_cache, monkeypatch, tmp_path):
    import layercache.report.saving as saving

    def full(texts, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(next(iter(texts))))

    monkeypatch.setattr(saving, "write_texts_atomic", full)  # what writes report.json and report.html
    result = invoke("probe-report", report_cache, "--out", tmp_path / "report", "--no-mdl", "--no-cumulative",
                    "--no-train-act", "--threads", "1", "-q")
    assert_refused(result, "report", "the disk is full", "free space")
    assert not (tmp_path / "report" / "report.json").exists() and not (tmp_path / "report" / "report.html").exists()
