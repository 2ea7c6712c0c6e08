"""What the job manager and its REST API (``rest.py``) share: how much history they keep and
the refusal of a savepoint. Apart from ``jobmanager.py``, which starts the REST server, so that
``rest.py`` does not import it back."""

from __future__ import annotations

FAILURE_HISTORY = 100  # task failures kept for GET /v1/exceptions (a job restarting forever must not grow)
SAVEPOINT_HISTORY = 100  # savepoints listed by GET /v1/savepoints, newest first


class SavepointRefused(RuntimeError):
    """A savepoint request that cannot be served; the message says why."""
