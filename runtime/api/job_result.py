"""What ``execute()`` returns. Apart from ``environment``, which runs the executor, so that the
executor (``cluster/executor.py``) can build it without importing ``environment`` back."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class JobExecutionResult:
    job_id: str
    job_name: str
    net_runtime_ms: int
    operators: dict[str, dict[str, int]]
    # From the first task starting to process to the last one finishing:
    # the net runtime less deployment (Spark stage start, address exchange).
    running_time_ms: int | None = None
    checkpoints: list[dict] = field(default_factory=list)  # statistics of each checkpoint, oldest first
    restarts: int = 0

    def get_job_id(self) -> str:
        return self.job_id

    def get_net_runtime(self) -> int:
        return self.net_runtime_ms
