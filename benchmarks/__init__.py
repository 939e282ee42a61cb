"""The benchmarks: scripts that measure layercache's speed, memory and quality and write JSON results.

Each is run as a script (``python benchmarks/NAME.py``); this file makes the folder a package only so that
the import contract in ``pyproject.toml`` can hold them to layercache's public API.
"""
