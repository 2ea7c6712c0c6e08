"""PyFlink calls streamjob does not implement, each with what to use instead.

A PyFlink program ported by changing its imports must fail where it is built,
naming the call, never run with a call silently ignored. Each class of the
DataStream API looks names up here when they are not real attributes
(``__getattr__``), so implementing a call later only needs its entry removed
(a test checks that no entry shadows a real method).
"""

from __future__ import annotations

from typing import Any


class PyFlinkNotSupported(NotImplementedError):
    """A PyFlink API call streamjob does not implement; the message names it and the alternative."""

    def __init__(self, call: str, alternative: str):
        self.call = call
        self.alternative = alternative
        super().__init__(f"{call} is not supported by streamjob: {alternative}")


_RECORDS_ARE_PICKLED = ("records are Python objects, pickled (dict records columnar as Arrow): there are no Java "
                        "serializers to register; remove the call")
_ONE_PARALLELISM = ("every operator runs at the job's parallelism (one subtask of each per slot); set it for the "
                    "whole job with env.set_parallelism(n) or `streamjob run --parallelism n`")
_CHAINING = ("streamjob chains every forward edge and has no slot sharing groups (each slot runs one subtask of "
             "every operator); chaining changes no result, so remove the call")
_PYTHON_DEPS = ("the job's own folder is shipped to the tasks with the job; install other packages in the image "
                "(or the virtualenv) the job runs in, then remove the call")
_NO_JAVA = "streamjob runs no Java: its connectors are Python (streamjob.runtime.connectors); remove the call"
_NO_COLLECT = ("results do not come back to the program; write them with sink_to(FileSink...) and read the files, "
               "or print() them")
_UID_HASH = "use .uid(name): state is matched to operators by uid on restore"

ENVIRONMENT: dict[str, str] = {
    "register_slot_sharing_group": _CHAINING,
    "disable_operator_chaining": _CHAINING,
    "is_chaining_of_operators_with_different_max_parallelism_enabled": _CHAINING,
    "enable_changelog_state_backend": ("there is no changelog state backend; the HashMap backend's snapshots are "
                                       "copy-on-write and asynchronous, RocksDB's incremental "
                                       "(get_checkpoint_config().set_incremental(True))"),
    "is_changelog_state_backend_enabled": "there is no changelog state backend",
    "get_restart_strategy": "the restart strategy is in the configuration: env.get_config() (restart-strategy.*)",
    "add_default_kryo_serializer": _RECORDS_ARE_PICKLED,
    "register_type_with_kryo_serializer": _RECORDS_ARE_PICKLED,
    "register_type": _RECORDS_ARE_PICKLED,
    "add_python_file": _PYTHON_DEPS,
    "set_python_requirements": _PYTHON_DEPS,
    "add_python_archive": _PYTHON_DEPS,
    "set_python_executable": "the tasks run the interpreter `streamjob run` runs in; remove the call",
    "add_jars": _NO_JAVA,
    "add_classpaths": _NO_JAVA,
    "get_default_local_parallelism": "use env.get_parallelism()",
    "set_default_local_parallelism": "use env.set_parallelism(n) or `streamjob run --parallelism n`",
    "register_cached_file": "read the file from a path or URL (file://, s3://) the tasks can reach",
    "create_input": ("Java InputFormats do not exist here; use env.from_source(FileSource...) or another source "
                     "of streamjob.runtime.connectors"),
}

_STREAM_COMMON: dict[str, str] = {
    "set_parallelism": _ONE_PARALLELISM,
    "set_max_parallelism": "max parallelism is the job's: env.set_max_parallelism(n)",
    "force_non_parallel": _ONE_PARALLELISM,
    "set_uid_hash": _UID_HASH,
    "slot_sharing_group": _CHAINING,
    "start_new_chain": _CHAINING,
    "disable_chaining": _CHAINING,
    "set_buffer_timeout": "the buffer timeout is the job's: env.set_buffer_timeout(ms)",
}

DATA_STREAM: dict[str, str] = {
    **_STREAM_COMMON,
    "get_type": "streams carry Python objects and have no declared type; keep the output_type you passed",
    "execute_and_collect": _NO_COLLECT,
    "cache": "cached intermediate results exist only in Flink's batch mode; write them with a FileSink and read "
             "them back with a FileSource",
}

KEYED_STREAM: dict[str, str] = dict(DATA_STREAM)

CONNECTED_STREAMS: dict[str, str] = {
    # key_by belongs with KeyedCoProcessFunction (not listed: it is being built)
}

DATA_STREAM_SINK: dict[str, str] = {
    "set_parallelism": _ONE_PARALLELISM,
    "set_uid_hash": _UID_HASH,
    "slot_sharing_group": _CHAINING,
    "disable_chaining": _CHAINING,
}


def lookup(owner: str, table: dict[str, str]) -> Any:
    """A ``__getattr__`` that names a PyFlink call of ``table`` and its alternative; any other
    missing name is an ordinary AttributeError (so pickling and ``hasattr`` probes work as usual)."""

    def __getattr__(self: Any, name: str) -> Any:
        alternative = table.get(name)
        if alternative is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        raise PyFlinkNotSupported(f"{owner}.{name}()", alternative)

    return __getattr__


__all__ = ["PyFlinkNotSupported", "lookup"]
