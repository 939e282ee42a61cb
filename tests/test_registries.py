"""Adding a mixer, a data-file format or a probe is adding one module: each registry finds it by itself.

Each test puts a new module on the package's search path (a temporary folder, so the source
tree is untouched), asks the registry again, and finds the new entry listed after the built-in
ones, with nothing else edited.
"""

from __future__ import annotations

import sys
import textwrap

import pytest


@pytest.fixture
def extra_module(tmp_path, monkeypatch):
    """``add(package, name, source)``: make ``package.name`` importable from ``tmp_path``; undone after the test."""
    added = []

    def add(package, name: str, source: str) -> None:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
        added.append(f"{package.__name__}.{name}")

    yield add
    for module in added:
        sys.modules.pop(module, None)


def test_a_new_mixer_module_is_registered_and_offered(extra_module, monkeypatch):
    from layercache.heads import mixers
    from layercache.heads.mixers import registry

    monkeypatch.setattr(registry.MIXERS, "_entries", dict(registry.MIXERS))  # forget the new class after
    before = list(registry.MIXERS)
    extra_module(mixers, "zz_first_state", """
        from layercache.heads.mixers.base import LayerMixer, MixOutput, register_mixer

        @register_mixer
        class FirstState(LayerMixer):
            '''Reads state 0 only.'''
            name = "first_state"

            def _mix(self, states, mask):
                return MixOutput(mixed=states[:, :, 0], aux_loss=self._zero(states))
    """)
    assert registry.mixer_names() == [*before, "first_state"]


def test_a_new_format_module_is_read_by_extension(extra_module):
    from layercache.sources import formats, registry

    extra_module(formats, "zz_lines", """
        from layercache.sources.formats.base import FileSource

        def read_lines(split_name, path):
            raise NotImplementedError

        FILE_SOURCES = (FileSource("lines", (".lines",), read_lines),)
    """)
    found = registry._load_sources()
    assert [s.name for s in found] == [s.name for s in registry.FILE_SOURCES] + ["lines"]


def test_a_new_probe_module_registers_itself(extra_module, monkeypatch):
    import layercache.probes as probes
    from layercache.probes import registry

    monkeypatch.setattr(registry.PROBES, "_entries", dict(registry.PROBES))  # forget the new class after
    before = registry.probe_names()
    extra_module(probes, "zz_constant", """
        from layercache.probes.base import Probe
        from layercache.probes.registry import register_probe

        @register_probe("constant")
        class ConstantProbe(Probe):
            '''Predicts the majority class at every layer.'''
    """)
    assert "linear" in before and registry.probe_names() == [*before, "constant"]
    assert registry.probe_class("constant").__name__ == "ConstantProbe"
    with pytest.raises(TypeError, match="takes a Probe subclass"):
        registry.register_probe("loose")(type("Loose", (), {}))


def test_a_new_storage_codec_module_is_a_storage_dtype(extra_module, monkeypatch):
    from layercache.store import codecs
    from layercache.store.schema import MANIFEST_SCHEMA, ManifestSchemaError

    monkeypatch.setattr(codecs.CODECS, "_entries", dict(codecs.CODECS.load()))  # forget the new codec after
    before = codecs.codec_names()
    extra_module(codecs, "zz_float64", """
        import numpy as np
        import torch

        from layercache.store.codecs.base import StorageCodec, register_codec

        @register_codec
        class Float64(StorageCodec):
            '''Double precision, for the test.'''
            name = "float64"
            torch_dtype = torch.float64
            file_dtype = np.dtype(np.float64)
    """)
    assert before == ["float16", "bfloat16", "float32", "int8", "int4"] and codecs.codec_names() == [*before, "float64"]
    assert codecs.codec("float64").bytes_per_value == 8
    assert codecs.check_storage_dtype("float64") == "float64"
    dtype_rule = MANIFEST_SCHEMA.required["storage"].required["dtype"]  # the schema reads the registry
    dtype_rule("float64", "storage.dtype")
    with pytest.raises(ManifestSchemaError,
                       match="storage.dtype should be one of float16, bfloat16, float32, int8, int4, float64"):
        dtype_rule("int3", "storage.dtype")
