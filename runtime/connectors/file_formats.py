"""Files the way PyFlink writes them (``pyflink.datastream.connectors.file_system``): the formats,
policies and builders. ``file_system`` is the PyFlink module's name for them with ``FileSource`` and
``FileSink``; the builders get those classes from the ``for_...`` call that makes them (this module
does not import ``files``, which imports it).

    FileSink.for_row_format(path, Encoder.simple_string_encoder())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("pre").with_part_suffix(".txt").build())
        .with_rolling_policy(RollingPolicy.default_rolling_policy(part_size=..., rollover_interval=...))
        .build()
    FileSource.for_record_stream_format(StreamFormat.text_line_format(), path).monitor_continuously(...).build()

The sink is the exactly-once FileSink of ``files.py`` with a row encoder, part
names ``<prefix>-<job id>-<subtask>-<n><suffix>`` (Flink's have a uuid where the
job id is) and Flink's buckets (by default one directory per hour,
``yyyy-MM-dd--HH``). One difference, for exactly-once on every filesystem: an
in-progress part file cannot be resumed after a failure (S3 has no truncate), so
a part file also rolls at every checkpoint, whatever the rolling policy; output
is the same, files are smaller.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any

from ..api.time import Duration
from ..api.types import Row
from ..api.unsupported import PyFlinkNotSupported


class Encoder:
    """Turns records into the bytes of a row-format part file."""

    def __init__(self, charset_name: str = "UTF-8"):
        "".encode(charset_name)  # an unknown charset fails here, where the job is built
        self.charset_name = charset_name

    @staticmethod
    def simple_string_encoder(charset_name: str = "UTF-8") -> "Encoder":
        """Each record as its string and a newline (a Row as Flink prints it: ``+I[a, 1]``)."""
        return Encoder(charset_name)

    def encode(self, records: list) -> bytes:
        return "".join(f"{r.to_flink_string() if type(r) is Row else r}\n" for r in records).encode(self.charset_name)


class StreamFormat:
    """How a FileSource reads records from a file."""

    def __init__(self, fmt: str, charset_name: str = "UTF-8"):
        "".encode(charset_name)
        self.format = fmt
        self.charset_name = charset_name

    @staticmethod
    def text_line_format(charset_name: str = "UTF-8") -> "StreamFormat":
        """Each line of a file as a string, without its line break (compressed files by extension:
        .gz, .bz2, .xz, ...). After a failure a file is read again from its start, and the lines
        read before the checkpoint are skipped, as Flink's TextLineInputFormat does."""
        return StreamFormat("text", charset_name)


class FileSourceBuilder:
    def __init__(self, stream_format: StreamFormat, paths: tuple[str, ...], source_class: Any):
        if not isinstance(stream_format, StreamFormat):
            raise TypeError(f"FileSource.for_record_stream_format needs a StreamFormat (StreamFormat."
                            f"text_line_format()), got {stream_format!r}")
        if not paths:
            raise ValueError("FileSource.for_record_stream_format needs at least one path")
        self._format = stream_format
        self._paths = [str(p) for p in paths]
        self._monitor: float | None = None
        self._source_class = source_class  # files.FileSource

    def monitor_continuously(self, discovery_interval: Duration) -> "FileSourceBuilder":
        """Keep watching the paths and read new files, listing them every ``discovery_interval``."""
        millis = discovery_interval.to_milliseconds() if hasattr(discovery_interval, "to_milliseconds") \
            else discovery_interval
        if not isinstance(millis, (int, float)) or millis <= 0:
            raise ValueError(f"monitor_continuously needs a positive Duration, got {discovery_interval!r}")
        self._monitor = millis / 1000.0
        return self

    def process_static_file_set(self) -> "FileSourceBuilder":
        """Read the files there are now, then end (the default)."""
        self._monitor = None
        return self

    def set_file_enumerator(self, file_enumerator: Any) -> "FileSourceBuilder":
        raise PyFlinkNotSupported("FileSourceBuilder.set_file_enumerator()",
                                  "files are listed recursively, hidden ones (. and _) skipped, one split per "
                                  "file; remove the call")

    def set_split_assigner(self, split_assigner: Any) -> "FileSourceBuilder":
        raise PyFlinkNotSupported("FileSourceBuilder.set_split_assigner()",
                                  "files are dealt to the subtasks evenly; remove the call")

    def build(self) -> Any:
        return self._source_class(self._paths[0], self._format.format, self._monitor, paths=self._paths,
                          charset=self._format.charset_name)


class OutputFileConfig:
    """Part file names: ``<prefix>-<job id>-<subtask>-<n><suffix>``."""

    def __init__(self, part_prefix: str = "part", part_suffix: str = ""):
        for what, value in (("prefix", part_prefix), ("suffix", part_suffix)):
            if not isinstance(value, str) or "/" in value:
                raise ValueError(f"OutputFileConfig part {what} must be a string without '/', got {value!r}")
        if not part_prefix or part_prefix.startswith((".", "_")):
            # Hidden names are how the sink marks unfinished files (and readers skip them).
            raise ValueError(f"OutputFileConfig part prefix must be non-empty and not start with '.' or '_', "
                             f"got {part_prefix!r}")
        self.part_prefix = part_prefix
        self.part_suffix = part_suffix

    @staticmethod
    def builder() -> "OutputFileConfig.OutputFileConfigBuilder":
        return OutputFileConfig.OutputFileConfigBuilder()

    def get_part_prefix(self) -> str:
        return self.part_prefix

    def get_part_suffix(self) -> str:
        return self.part_suffix

    class OutputFileConfigBuilder:
        def __init__(self) -> None:
            self.part_prefix = "part"
            self.part_suffix = ""

        def with_part_prefix(self, prefix: str) -> "OutputFileConfig.OutputFileConfigBuilder":
            self.part_prefix = prefix
            return self

        def with_part_suffix(self, suffix: str) -> "OutputFileConfig.OutputFileConfigBuilder":
            self.part_suffix = suffix
            return self

        def build(self) -> "OutputFileConfig":
            return OutputFileConfig(self.part_prefix, self.part_suffix)


class RollingPolicy:
    """When a part file closes and the next one opens (it also closes at every checkpoint)."""

    @staticmethod
    def default_rolling_policy(part_size: int = 1024 * 1024 * 128, rollover_interval: int = 60 * 1000,
                               inactivity_interval: int = 60 * 1000) -> "DefaultRollingPolicy":
        return DefaultRollingPolicy(part_size, rollover_interval, inactivity_interval)

    @staticmethod
    def on_checkpoint_rolling_policy() -> "OnCheckpointRollingPolicy":
        return OnCheckpointRollingPolicy()

    def should_roll_on_event(self, size: int) -> bool:
        return False

    def should_roll_on_processing_time(self, now_ms: float, created_ms: float, last_write_ms: float) -> bool:
        return False


class DefaultRollingPolicy(RollingPolicy):
    """Rolls once a file is bigger than ``part_size`` bytes, older than ``rollover_interval`` ms, or was
    not written for ``inactivity_interval`` ms (Flink's DefaultRollingPolicy)."""

    def __init__(self, part_size: int, rollover_interval: int, inactivity_interval: int):
        for what, value in (("part_size", part_size), ("rollover_interval", rollover_interval),
                            ("inactivity_interval", inactivity_interval)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"RollingPolicy.default_rolling_policy: {what} must be a positive int, got {value!r}")
        self.part_size = part_size
        self.rollover_interval = rollover_interval
        self.inactivity_interval = inactivity_interval

    def should_roll_on_event(self, size: int) -> bool:
        return size > self.part_size

    def should_roll_on_processing_time(self, now_ms: float, created_ms: float, last_write_ms: float) -> bool:
        return now_ms - created_ms >= self.rollover_interval or now_ms - last_write_ms >= self.inactivity_interval


class OnCheckpointRollingPolicy(RollingPolicy):
    """Rolls only at checkpoints (and at the end of input)."""


_JAVA_PATTERN = re.compile(r"yyyy|yy|MM|dd|HH|mm|ss|'[^']*'|[A-Za-z]")
_STRFTIME = {"yyyy": "%Y", "yy": "%y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S"}


def _strftime_pattern(java_pattern: str) -> str:
    """Java DateTimeFormatter pattern (the common fields) -> strftime; other letters are refused."""
    def convert(m: re.Match) -> str:
        token = m.group(0)
        if token.startswith("'"):
            return token[1:-1].replace("%", "%%")
        if token not in _STRFTIME:
            raise ValueError(f"BucketAssigner.date_time_bucket_assigner: pattern letter {token!r} of {java_pattern!r} "
                             f"is not supported; use yyyy, yy, MM, dd, HH, mm, ss and quoted text")
        return _STRFTIME[token]

    return _JAVA_PATTERN.sub(convert, java_pattern.replace("%", "%%"))


class BucketAssigner:
    """The directory under the base path a part file goes to."""

    def __init__(self, strftime: str | None = None, timezone_id: str | None = None, pattern: str = ""):
        self.strftime = strftime
        self.timezone_id = timezone_id
        self.pattern = pattern
        self._zone()  # an unknown zone fails where the job is built

    @staticmethod
    def base_path_bucket_assigner() -> "BucketAssigner":
        """Every part file directly in the base path."""
        return BucketAssigner()

    @staticmethod
    def date_time_bucket_assigner(format_str: str = "yyyy-MM-dd--HH", timezone_id: str | None = None) -> "BucketAssigner":
        """One directory per period of the current time (the default: one per hour, ``2026-11-23--16``)."""
        return BucketAssigner(_strftime_pattern(format_str), timezone_id, format_str)

    def _zone(self) -> Any:
        if self.timezone_id is None:
            return None
        from zoneinfo import ZoneInfo

        return ZoneInfo(self.timezone_id)

    def bucket_id(self, now_s: float) -> str:
        if self.strftime is None:
            return ""
        zone = self._zone()
        moment = _dt.datetime.fromtimestamp(now_s, zone) if zone is not None else _dt.datetime.fromtimestamp(now_s)
        return moment.strftime(self.strftime)


class RowFormatBuilder:
    def __init__(self, base_path: str, encoder: Encoder, sink_class: Any):
        if not isinstance(encoder, Encoder):
            raise TypeError(f"FileSink.for_row_format needs an Encoder (Encoder.simple_string_encoder()), "
                            f"got {encoder!r}")
        self._path = str(base_path)
        self._encoder = encoder
        self._config = OutputFileConfig()
        self._rolling: RollingPolicy = RollingPolicy.default_rolling_policy()
        self._buckets = BucketAssigner.date_time_bucket_assigner()  # Flink's default
        self._check_interval_ms = 60 * 1000
        self._sink_class = sink_class  # files.FileSink

    def with_bucket_check_interval(self, interval: int) -> "RowFormatBuilder":
        """How often (ms) at most open part files are checked against the rolling policy's time limits.
        The check runs when records are written (Flink also runs it on a timer, so an idle file rolls
        there without new records; here it rolls at the next checkpoint or the end of input)."""
        if not isinstance(interval, int) or interval <= 0:
            raise ValueError(f"with_bucket_check_interval needs a positive number of milliseconds, got {interval!r}")
        self._check_interval_ms = interval
        return self

    def with_bucket_assigner(self, bucket_assigner: BucketAssigner) -> "RowFormatBuilder":
        if not isinstance(bucket_assigner, BucketAssigner):
            raise TypeError(f"with_bucket_assigner needs BucketAssigner.base_path_bucket_assigner() or "
                            f".date_time_bucket_assigner(...), got {bucket_assigner!r}")
        self._buckets = bucket_assigner
        return self

    def with_output_file_config(self, output_file_config: OutputFileConfig) -> "RowFormatBuilder":
        if not isinstance(output_file_config, OutputFileConfig):
            raise TypeError(f"with_output_file_config needs an OutputFileConfig, got {output_file_config!r}")
        self._config = output_file_config
        return self

    def with_rolling_policy(self, rolling_policy: RollingPolicy) -> "RowFormatBuilder":
        if not isinstance(rolling_policy, RollingPolicy):
            raise TypeError(f"with_rolling_policy needs RollingPolicy.default_rolling_policy(...) or "
                            f".on_checkpoint_rolling_policy(), got {rolling_policy!r}")
        self._rolling = rolling_policy
        return self

    def enable_compact(self, strategy: Any, compactor: Any) -> "RowFormatBuilder":
        raise PyFlinkNotSupported("FileSink.RowFormatBuilder.enable_compact()",
                                  "small files are not compacted; roll less often (with_rolling_policy) instead")

    def disable_compact(self) -> "RowFormatBuilder":
        return self  # compaction is never on

    def build(self) -> Any:
        return self._sink_class(self._path, "row", encoder=self._encoder, part_prefix=self._config.part_prefix,
                        part_suffix=self._config.part_suffix, rolling_policy=self._rolling,
                        bucket_assigner=self._buckets, check_interval_ms=self._check_interval_ms)


__all__ = [
    "BucketAssigner",
    "DefaultRollingPolicy",
    "Encoder",
    "FileSourceBuilder",
    "OnCheckpointRollingPolicy",
    "OutputFileConfig",
    "RollingPolicy",
    "RowFormatBuilder",
    "StreamFormat",
]
