"""Errors a user meets, each as one line naming its cause (issue 30): storage that cannot be written,
librdkafka's connection errors, Spark's stage failures."""

from __future__ import annotations

import pytest

from streamjob.runtime.checkpoint.storage import CheckpointStorage, SavepointTarget, StorageWriteError
from streamjob.runtime.task.checkpointing import SnapshotJob, SnapshotWriter


# -- checkpoint storage and savepoints that cannot be written ----------------------------------------------

def test_a_state_file_that_cannot_be_written_names_checkpoint_storage_and_its_url(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "chk"), "job1", inline_threshold=10)
    storage.initialize()
    (tmp_path / "chk" / "job1" / "chk-1").write_text("a file where the checkpoint's directory goes")
    with pytest.raises(StorageWriteError) as e:
        storage.write_state(1, "op-0", b"x" * 100, {})
    assert str(e.value).startswith(f"checkpoint storage file://{tmp_path}/chk: cannot write to it: "
                                   f"FileExistsError: "), e.value  # the OS's words for a file in the way
    sst = tmp_path / "local.sst"
    sst.write_bytes(b"y" * 100)
    (tmp_path / "chk" / "job1" / "shared").rmdir()
    (tmp_path / "chk" / "job1" / "shared").write_text("")
    with pytest.raises(StorageWriteError, match=r"^checkpoint storage file://.*/chk: cannot write to it"):
        storage.upload_shared(1, str(sst))


def test_checkpoint_storage_that_is_a_file_names_it_at_initialize(tmp_path):
    (tmp_path / "x").write_text("")
    with pytest.raises(StorageWriteError, match=rf"^checkpoint storage file://{tmp_path}/x: cannot write to it: "
                                                r"(NotADirectoryError|FileExistsError)"):
        CheckpointStorage(str(tmp_path / "x"), "job1").initialize()


def test_a_savepoint_state_file_that_cannot_be_written_names_the_savepoint_and_its_url(tmp_path):
    (tmp_path / "sp").write_text("")
    target = SavepointTarget(str(tmp_path / "sp" / "savepoint-1"), inline_threshold=10)
    with pytest.raises(StorageWriteError, match=rf"^savepoint file://{tmp_path}/sp/savepoint-1: cannot write to it: "
                                                r"NotADirectoryError"):
        target.write_state(1, "op-0", b"x" * 100, {})


def test_the_task_declines_with_the_storage_line_not_a_bare_os_error(tmp_path):
    def write(snap, checkpoint_id):
        raise StorageWriteError(f"checkpoint storage file://{tmp_path}: cannot write to it: NotADirectoryError: x")

    writer = SnapshotWriter(write)
    writer.submit(SnapshotJob(task=None, checkpoint_id=1, snapshots=[object()], sync_ms=0.0, alignment_ms=0.0))
    assert writer.wait_idle(5)
    writer.close()
    assert writer.results[0].error == f"checkpoint storage file://{tmp_path}: cannot write to it: NotADirectoryError: x"
