"""A job manager on its own, in this process (no Spark), for tests that watch its console: it prints
``{"control": [host, port], "rest": url}`` on stdout, serves until stdin closes, then shuts down."""

import json
import sys

from streamjob.runtime.checkpoint.coordinator import CheckpointCoordinator, CheckpointSettings
from streamjob.runtime.checkpoint.storage import CheckpointStorage
from streamjob.runtime.cluster.jobmanager import JobManager


def main(checkpoint_dir: str) -> None:
    storage = CheckpointStorage(checkpoint_dir, "job1")
    storage.initialize()
    settings = CheckpointSettings(interval_ms=3_600_000, mode="EXACTLY_ONCE", timeout_ms=60_000, min_pause_ms=0,
                                  max_concurrent=1, tolerable_failures=0, num_retained=1,
                                  retention="NO_EXTERNALIZED_CHECKPOINTS")
    cc = CheckpointCoordinator(settings, storage, job_id="job1", job_name="j", parallelism=2, max_parallelism=128,
                               operators={"op": "Op"}, tasks=[0])
    jm = JobManager("job1", "j", 2, coordinator=cc, rest=("127.0.0.1", 0, ""),
                    plan={"vertices": [], "edges": []})
    control = jm.start()
    jm.begin_attempt(0, None)
    print(json.dumps({"control": list(control), "rest": jm.rest.url}), flush=True)
    sys.stdin.read()
    jm.shutdown()
    print(json.dumps({"failures": [f.summary(2) for f in jm.failures]}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
