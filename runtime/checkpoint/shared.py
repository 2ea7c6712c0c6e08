"""Which completed checkpoints reference each file in ``shared/`` (incremental RocksDB state).

Pure bookkeeping, no I/O: the coordinator registers a checkpoint's shared
files when it completes and unregisters them when it is discarded; a file is
deleted exactly when the last retained checkpoint referencing it goes. Shared
files are named ``shared/<n>-<uuid>.sst`` by the task that uploaded them for
checkpoint ``n``, so a file nobody references and whose checkpoint is no
longer in progress is an orphan (an upload of a failed, aborted or
killed-mid-upload checkpoint) and can be deleted safely.
"""

from __future__ import annotations

import posixpath
import re
from typing import Iterable

_OWNER = re.compile(r"^(\d+)-")


def uploaded_for(relative: str) -> int | None:
    """The checkpoint a shared file was uploaded for (from its name), or None for foreign names."""
    m = _OWNER.match(posixpath.basename(relative))
    return int(m.group(1)) if m else None


class SharedStateRegistry:
    def __init__(self) -> None:
        self.references: dict[str, set[int]] = {}

    def register(self, checkpoint_id: int, files: Iterable[str]) -> None:
        for f in files:
            self.references.setdefault(f, set()).add(checkpoint_id)

    def unregister(self, checkpoint_id: int, files: Iterable[str]) -> list[str]:
        """Drop checkpoint ``n``'s references; returns the files no retained checkpoint references any more."""
        unused = []
        for f in set(files):
            refs = self.references.get(f)
            if refs is None:
                continue
            refs.discard(checkpoint_id)
            if not refs:
                del self.references[f]
                unused.append(f)
        return unused

    def dangling(self, checkpoint_id: int, files: Iterable[str]) -> list[str]:
        """Files checkpoint ``n`` reuses that no retained checkpoint holds any more (a task's view of
        the last completed checkpoint was stale); completing ``n`` would reference deleted state."""
        return [f for f in files if f not in self.references and uploaded_for(f) != checkpoint_id]

    def orphans(self, listing: Iterable[str], in_progress: set[int]) -> list[str]:
        """Files in ``shared/`` that no retained checkpoint references and no pending checkpoint may still claim."""
        out = []
        for f in listing:
            if f in self.references:
                continue
            owner = uploaded_for(f)
            if owner is None or owner in in_progress:
                continue  # not ours to delete, or its checkpoint may still complete
            out.append(f)
        return out

    def __len__(self) -> int:
        return len(self.references)
