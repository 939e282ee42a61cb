"""Extraction: run a frozen backbone once over records and write a resumable cache of its states.

:func:`~layercache.extraction.run.extract` is the entry point; the modules beside it each hold
one step of the run.
"""
