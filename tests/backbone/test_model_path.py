"""A local model folder given as a relative path is recorded as an absolute one (issue 26).

``verify`` and ``predict`` load the backbone from what the manifest (and a run's config) recorded;
``./my-model`` recorded as given named nothing from another folder, and the Hub was asked for it.
The fingerprint stays the model's identity: the configuration hash does not cover the path, so a
cache that recorded a relative path keeps resuming.
"""

from __future__ import annotations

import json
import os

import layercache as lc
from layercache.backbone.loader import load_backbone


def test_a_relative_model_folder_is_recorded_as_an_absolute_path(tiny_models, tsv, tmp_path, monkeypatch):
    models = tiny_models["bert"].parent
    monkeypatch.chdir(models)
    relative = f".{os.sep}{tiny_models['bert'].name}"
    result = lc.extract(relative, str(tsv), tmp_path / "cache", progress=False)
    recorded = result.manifest.model
    assert recorded.name == recorded.source == str(tiny_models["bert"].resolve())
    assert load_backbone(relative, device="cpu").fingerprint == recorded.fingerprint
    monkeypatch.chdir(tmp_path)  # another folder: the recorded path still names the model
    assert load_backbone(recorded.source, device="cpu").fingerprint == recorded.fingerprint


def test_a_cache_that_recorded_a_relative_path_still_resumes(tiny_models, tsv, tmp_path, monkeypatch):
    monkeypatch.chdir(tiny_models["bert"].parent)
    relative = tiny_models["bert"].name  # a bare folder name in the working directory
    out = tmp_path / "cache"
    lc.extract(relative, str(tsv), out, progress=False)
    path = out / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["model"]["name"] = manifest["model"]["source"] = relative  # as layercache recorded it before
    path.write_text(json.dumps(manifest))
    again = lc.extract(relative, str(tsv), out, progress=False)
    assert again.already_complete and again.manifest.config_hash == manifest["config_hash"]
    assert lc.extract(str(tiny_models["bert"]), str(tsv), out, progress=False).already_complete
