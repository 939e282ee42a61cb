"""``torchrun ... rank_faults.py extract ...``: the layercache command, with a fault planted in one rank.

``FAULT_RANK`` names the rank, ``FAULT_AFTER`` the shard append after which it strikes, and ``FAULT``
what happens: ``kill`` (SIGKILL, as the out-of-memory killer would: nothing can be reported) or
``error`` (an OSError, as a full disk gives: the rank reports it). Other ranks run the plain command.
"""

from __future__ import annotations

import errno
import os
import signal

from layercache.store.writer import ShardWriter

if os.environ.get("RANK") == os.environ.get("FAULT_RANK"):
    after, fault, appended = int(os.environ["FAULT_AFTER"]), os.environ["FAULT"], []
    original = ShardWriter.append

    def append(self, batch):
        original(self, batch)
        appended.append(1)
        if len(appended) == after:
            if fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise OSError(errno.ENOSPC, "No space left on device (planted)")

    ShardWriter.append = append

from layercache.cli import main  # noqa: E402 - after the fault is planted

main()
