"""Turn HDF5's ``OSError`` for damaged bytes inside a shard into one :class:`CacheError` sentence.

Every reader of shards (:class:`~layercache.store.reader.LayerCache` and the feeds over it) wraps its
reading methods in :func:`translate_read_errors`.
"""

from __future__ import annotations

import functools
import inspect

from ..core.option_names import call
from ..errors import CacheError, LayercacheError


def translate_read_errors(method):
    """Turn HDF5's ``OSError`` for damaged bytes inside a shard into one :class:`CacheError` sentence.

    The layout of every shard is checked when it is opened (:func:`check_shard_layout`), but HDF5
    keeps more metadata than that (chunk B-trees, heaps) and reads it lazily; a damaged byte there
    surfaces as ``OSError`` in the middle of a read. Works for plain methods and generators.
    """
    def refusal(reader, err: OSError) -> CacheError:
        path = getattr(reader, "path", None) or reader.cache.path  # a LayerCache, or a feed over one
        return CacheError(f"A shard of {path} cannot be read ({_first_line(err)}); find it with "
                          f"`layercache info --check` and re-extract it with {call('extract', repair=True)}.")

    if inspect.isgeneratorfunction(method):
        @functools.wraps(method)
        def generator(self, *args, **kwargs):
            try:
                yield from method(self, *args, **kwargs)
            except LayercacheError:
                raise
            except OSError as err:
                raise refusal(self, err) from None
        return generator

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except LayercacheError:
            raise
        except OSError as err:
            raise refusal(self, err) from None
    return wrapper


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:160] if text else type(err).__name__
