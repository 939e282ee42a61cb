"""``python -m layercache.cli``: the same as the ``layercache`` command."""

from . import main

main()
