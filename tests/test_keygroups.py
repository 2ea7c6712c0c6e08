"""Key -> key group -> subtask: stable, vectorised and scalar alike, as Flink's assignment."""

import datetime as dt
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from streamjob.runtime.keygroups import (
    assign_key_groups,
    assign_to_key_group,
    key_group_range,
    key_hash,
    key_hashes,
    operator_index_for_key_group,
)


def test_vectorised_int_hash_equals_scalar_hash():
    keys = np.array([0, 1, -1, 2**62, -(2**63), 123456789, 99999], dtype=np.int64)
    assert key_hashes(keys).tolist() == [key_hash(int(k)) for k in keys]
    assert key_hashes(keys.tolist()).tolist() == key_hashes(keys).tolist()


def test_equal_keys_hash_equally_across_types():
    assert key_hash(1) == key_hash(1.0) == key_hash(True) == key_hash(np.int32(1))
    assert key_hash("1") != key_hash(1)
    assert key_hash(b"a") != key_hash("a")
    assert key_hash(("a", 1)) != key_hash((1, "a"))
    assert key_hash(dt.date(2024, 1, 1)) == key_hash(dt.date(2024, 1, 1))


def test_unhashable_key_is_a_clear_error():
    with pytest.raises(TypeError, match="no stable hash"):
        key_hash(object())


@pytest.mark.parametrize("max_p", [1, 7, 128, 32768])
@pytest.mark.parametrize("p", [1, 2, 3, 5, 7])
def test_key_group_ranges_partition_all_groups_and_match_assignment(max_p, p):
    if p > max_p:
        return
    owned = [key_group_range(max_p, p, i) for i in range(p)]
    flat = [kg for r in owned for kg in r]
    assert flat == list(range(max_p))
    for i, r in enumerate(owned):
        for kg in (r.start, r.stop - 1) if len(r) else ():
            assert operator_index_for_key_group(max_p, p, kg) == i


def test_routing_is_independent_of_pythonhashseed():
    code = textwrap.dedent(
        """
        from streamjob.runtime.keygroups import assign_to_key_group
        keys = [f"user-{i}" for i in range(200)] + [("t", i) for i in range(50)] + [b"raw", 3.5, None]
        print([assign_to_key_group(k, 128) for k in keys])
        """
    )
    outputs = {
        subprocess.run([sys.executable, "-c", code], env={"PYTHONHASHSEED": seed, "PATH": ""},
                       capture_output=True, text=True, check=True).stdout
        for seed in ("1", "2", "31337")
    }
    assert len(outputs) == 1
    groups = eval(outputs.pop())
    assert len(set(groups)) > 64  # spread over the key groups, not piled up


def test_assign_key_groups_matches_scalar():
    keys = [f"k{i}" for i in range(100)] + list(range(100))
    assert assign_key_groups(keys, 128).tolist() == [assign_to_key_group(k, 128) for k in keys]
