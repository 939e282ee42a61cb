"""Data sources: the built-in task set, local files, saved folders and the Hub, read into records.

:func:`~layercache.sources.datasets.load_dataset_records` is the entry point; local file formats
live one module each in :mod:`layercache.sources.formats`, and
:mod:`layercache.sources.registry` collects them by extension.
"""
