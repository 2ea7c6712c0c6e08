"""State backends as PyFlink names them: ``env.set_state_backend(HashMapStateBackend())``.

A backend object only says which backend to use; it is written into the job
configuration (``state.backend.type``) and each task creates its own.
"""

from __future__ import annotations


class StateBackend:
    type_name = ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class HashMapStateBackend(StateBackend):
    """Keyed state in Python dicts in the task's memory (the default); copy-on-write snapshots."""

    type_name = "hashmap"


__all__ = ["HashMapStateBackend", "StateBackend"]
