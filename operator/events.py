"""Reasons of the Kubernetes events the operator posts: one enum, so ``kubectl describe sj`` tells one story."""

from __future__ import annotations

from enum import Enum


class Reason(str, Enum):
    # spec
    SPEC_INVALID = "SpecInvalid"
    SPEC_CHANGED = "SpecChanged"
    # deployments
    DEPLOYING = "Deploying"
    DEPLOYED = "Deployed"
    RUNNING = "JobRunning"
    STABLE = "JobStable"
    FINISHED = "JobFinished"
    UPGRADING = "Upgrading"
    RESCALING = "Rescaling"
    RESCALED = "Rescaled"
    SCALING_REPORT = "ScalingReport"  # an autoscaler decision (dry run too), as the flink-kubernetes-operator's
    AUTOSCALER_ERROR = "AutoscalerError"
    UPGRADE_BLOCKED = "UpgradeBlocked"
    SUSPENDING = "Suspending"
    SUSPENDED = "Suspended"
    RESUMING = "Resuming"
    CANCELING = "Canceling"
    # failures
    JOB_FAILED = "JobFailed"
    DRIVER_LOST = "DriverLost"
    IMAGE_ERROR = "ImageError"
    REDEPLOYING = "Redeploying"
    FAILED = "Failed"
    JOB_MANAGER_UNREACHABLE = "JobManagerUnreachable"
    # savepoints
    SAVEPOINT_TRIGGERED = "SavepointTriggered"
    SAVEPOINT_COMPLETED = "SavepointCompleted"
    SAVEPOINT_FAILED = "SavepointFailed"
    SAVEPOINT_DISPOSED = "SavepointDisposed"
    SAVEPOINT_DISPOSE_FAILED = "SavepointDisposeFailed"
    # health
    RESTART_LOOP = "RestartLoop"
    CHECKPOINTS_STALLED = "CheckpointsStalled"
    HEALTHY = "Healthy"
    ROLLING_BACK = "RollingBack"
    ROLLED_BACK = "RolledBack"
    # deletion
    DELETING = "Deleting"
    DELETE_TIMEOUT = "DeleteTimeout"

    def __str__(self) -> str:
        return self.value
