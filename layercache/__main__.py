"""``python -m layercache``: the ``layercache`` command, also as ``torchrun ... -m layercache extract ...``."""

from .cli import main

main()
