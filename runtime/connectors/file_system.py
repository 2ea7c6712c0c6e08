"""PyFlink's ``pyflink.datastream.connectors.file_system``: ``FileSource`` and ``FileSink``
(``files.py``) with the formats, policies and builders of ``file_formats.py``."""

from __future__ import annotations

from .file_formats import (BucketAssigner, DefaultRollingPolicy, Encoder, FileSourceBuilder,
                           OnCheckpointRollingPolicy, OutputFileConfig, RollingPolicy, RowFormatBuilder, StreamFormat)
from .files import FileSink, FileSource

__all__ = [
    "BucketAssigner",
    "DefaultRollingPolicy",
    "Encoder",
    "FileSink",
    "FileSource",
    "FileSourceBuilder",
    "OnCheckpointRollingPolicy",
    "OutputFileConfig",
    "RollingPolicy",
    "RowFormatBuilder",
    "StreamFormat",
]
