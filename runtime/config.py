"""Job configuration: string keys with Flink's names where Flink has one.

Keys starting with ``spark.`` are handed to Spark unchanged; the others are
the runtime's own. Values given on the command line arrive as strings and are
parsed by the typed getters, which name the key when a value does not parse.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping


class Options:
    PARALLELISM = "parallelism.default"
    MAX_PARALLELISM = "pipeline.max-parallelism"
    BUFFER_TIMEOUT = "execution.buffer-timeout"
    BATCH_SIZE = "execution.batch-size"
    BUFFERS_PER_CHANNEL = "taskmanager.network.memory.buffers-per-channel"
    METRICS_INTERVAL = "metrics.reporter.interval"
    SPARK_MASTER = "spark.master"


DEFAULTS: dict[str, Any] = {
    Options.PARALLELISM: 1,
    Options.MAX_PARALLELISM: 128,
    Options.BUFFER_TIMEOUT: 100,  # ms, as Flink's default
    Options.BATCH_SIZE: 8192,  # records per network batch
    Options.BUFFERS_PER_CHANNEL: 2,  # credits: batches in flight per input channel
    Options.METRICS_INTERVAL: 500,  # ms between task metric reports
}


class ConfigError(ValueError):
    pass


class Configuration:
    def __init__(self, values: Mapping[str, Any] | None = None):
        self._values: dict[str, Any] = dict(values or {})

    @staticmethod
    def from_pairs(pairs: Iterable[str]) -> "Configuration":
        """Parse ``key=value`` strings (``--conf``)."""
        conf = Configuration()
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"--conf {pair!r}: expected key=value")
            conf.set(key.strip(), value.strip())
        return conf

    def set(self, key: str, value: Any) -> "Configuration":
        self._values[key] = value
        return self

    # PyFlink spelling
    def set_string(self, key: str, value: str) -> "Configuration":
        return self.set(key, value)

    def set_integer(self, key: str, value: int) -> "Configuration":
        return self.set(key, int(value))

    def contains_key(self, key: str) -> bool:
        return key in self._values

    def get(self, key: str, default: Any = None) -> Any:
        if key in self._values:
            return self._values[key]
        return DEFAULTS.get(key, default)

    def get_string(self, key: str, default: str | None = None) -> str | None:
        value = self.get(key, default)
        return None if value is None else str(value)

    def get_int(self, key: str, default: int | None = None) -> int:
        value = self.get(key, default)
        try:
            if isinstance(value, bool):
                raise ValueError
            return int(str(value).strip()) if isinstance(value, str) else int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"configuration {key}: expected an integer, got {value!r}") from None

    def get_bool(self, key: str, default: bool = False) -> bool:
        value = self.get(key, default)
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "1", "yes", "on"):
            return True
        if text in ("false", "0", "no", "off"):
            return False
        raise ConfigError(f"configuration {key}: expected true or false, got {value!r}")

    def update(self, other: "Configuration | Mapping[str, Any]") -> "Configuration":
        values = other._values if isinstance(other, Configuration) else other
        self._values.update(values)
        return self

    def copy(self) -> "Configuration":
        return Configuration(self._values)

    def to_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def spark_conf(self) -> dict[str, str]:
        return {k: str(v) for k, v in self._values.items() if k.startswith("spark.")}

    def __repr__(self) -> str:
        return f"Configuration({self._values!r})"
