"""Local data-file formats, one module each (or one module per family, such as delimited and JSON tables).

A module here declares its formats as a module-level ``FILE_SOURCES`` tuple of
:class:`~layercache.sources.formats.base.FileSource`; :mod:`layercache.sources.registry` imports
every module of this package and collects them, so adding a format is adding one file.
"""
