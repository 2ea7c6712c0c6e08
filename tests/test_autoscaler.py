"""The autoscaler's decision (operator/autoscaler.py), table-tested as reconciler.decide is: FLIP-271's
arithmetic on concrete metrics, each expected figure worked out by hand beside it."""

from __future__ import annotations

import math

import pytest

from streamjob.operator.autoscaler import Collected, Memory, Sample, Settings, Vertex, decide, restart_time

SETTINGS = Settings(enabled=True, metrics_window=60, stabilization_interval=30, scale_down_interval=300,
                    catch_up_duration=600, restart_time=60)
SOURCE = Vertex("src", "Source: clicks", 2, 128, partitions=8)
COUNT = Vertex("count", "count -> Sink: out", 2, 128, inputs=("src",), keyed=True)
STABLE = Memory(stable_since=-1000.0)


def history(samples: dict[str, Sample | callable], start: float = 0.0, end: float = 60.0, step: float = 10.0):
    """Readings every ``step`` s; a callable sample is a function of the time (a growing lag)."""
    out, t = [], start
    while t <= end + 1e-9:
        out.append(Collected(t, {v: s(t) if callable(s) else s for v, s in samples.items()}))
        t += step
    return out


def lagging(t: float) -> Sample:  # reads 10k/s, 20% busy, while its backlog grows by 20k/s
    return Sample(10_000, 10_000, 200, pending_records=20_000 * t)


def test_a_busy_keyed_operator_behind_a_growing_lag_scales_up_to_a_divisor_of_the_key_groups():
    h = history({"src": lagging, "count": Sample(10_000, 10_000, 1000)})
    d = decide([SOURCE, COUNT], h, SETTINGS, STABLE, now=60)
    src, count = d.evaluations["src"], d.evaluations["count"]
    # source: input 10k + lag growth 20k = 30k/s; backlog 1.2M + 30k/s x 60 s restart = 3.0M, caught up in
    # 600 s: +5k/s -> target 35k/s; true rate 10k / 0.2 = 50k/s; utilization 0.7: kept.
    assert src.target_data_rate == pytest.approx(35_000) and src.true_processing_rate == pytest.approx(50_000)
    assert src.utilization == pytest.approx(0.7) and src.recommended == 2 and src.lag == pytest.approx(1_200_000)
    # count: target 35k x (10k out / 10k in) = 35k/s; true rate 10k / 1.0; utilization 3.5 -> 2 x 3.5 / 0.7
    # = 10 -> the next divisor of 128: 16.
    assert count.target_data_rate == pytest.approx(35_000) and count.utilization == pytest.approx(3.5)
    assert count.recommended == 16 and "scale up to 16" in count.reason
    assert d.act and d.parallelism == {"count": 16} and "scale up count 2 -> 16" in d.why


@pytest.mark.parametrize("settings, memory, samples, why", [
    (Settings(), STABLE, 7, "disabled"),
    (SETTINGS, Memory(stable_since=40.0), 7, "stabilizing after the last (re)start: 10 s"),
    (SETTINGS, STABLE, 3, "collecting metrics: 20 of 60 s"),
])
def test_no_decision_while_disabled_stabilizing_or_collecting(settings, memory, samples, why):
    h = history({"src": lagging, "count": Sample(10_000, 10_000, 1000)}, start=60 - 10 * (samples - 1))
    d = decide([SOURCE, COUNT], h, settings, memory, now=60)
    assert not d.act and not d.parallelism and why in d.why and d.memory == memory


def test_a_scale_down_waits_for_the_scale_down_interval_without_a_break():
    wide = Vertex("count", "count", 4, 128, inputs=("src",), keyed=True)
    # the source at its target (11k/s of 10k / 0.64 = 15.6k/s: utilization 0.70), count far below it
    quiet = {"src": Sample(10_000, 10_000, 640, pending_records=0), "count": Sample(10_000, 10_000, 100)}
    d = decide([SOURCE, wide], history(quiet), SETTINGS, STABLE, now=60)
    # count: target 10k + 10k x 60 / 600 = 11k/s; true 100k/s; utilization 0.11 -> 4 x 0.11 / 0.7 = 0.63 ->
    # 1, but at most a 0.6 step down: ceil(4 x 0.4) = 2 (a divisor of 128).
    e = d.evaluations["count"]
    assert e.utilization == pytest.approx(0.11) and e.recommended == 2 and "scaleDownMaxFactor" in e.reason
    assert not d.act and "would scale down to 2 in 300 s" in d.why and d.memory.scale_down_since == {"count": 60}
    later = decide([SOURCE, wide], history(quiet, 240, 300), SETTINGS, d.memory, now=300)
    assert not later.act and later.memory.scale_down_since == {"count": 60}  # 240 s so far
    due = decide([SOURCE, wide], history(quiet, 300, 360), SETTINGS, later.memory, now=360)
    assert due.act and due.parallelism == {"count": 2} and due.memory.scale_down_since == {}
    # A break (back within its target) starts the wait over.
    steady = {**quiet, "count": Sample(10_000, 10_000, 700)}  # utilization 11k / 14.3k = 0.77: within
    broken = decide([SOURCE, wide], history(steady, 120, 180), SETTINGS, d.memory, now=180)
    assert broken.memory.scale_down_since == {} and not broken.parallelism


def test_bounds_partitions_min_max_parallelism_and_exclusions():
    hot_source = Vertex("src", "Source", 2, 128, partitions=4)
    h = history({"src": lagging, "count": Sample(10_000, 10_000, 1000)})
    # A source at full busy behind a growing lag: wants more than its 4 partitions.
    h_busy_source = history({"src": lambda t: Sample(10_000, 10_000, 1000, pending_records=20_000 * t),
                             "count": Sample(10_000, 10_000, 200)})
    d = decide([hot_source, COUNT], h_busy_source, SETTINGS, STABLE, now=60)
    assert d.evaluations["src"].recommended == 4 and "4 partitions" in d.evaluations["src"].reason
    # maxParallelism 6: no divisor of 128 in 6..6, so 6.
    capped = decide([SOURCE, COUNT], h, Settings(**{**SETTINGS.__dict__, "max_parallelism": 6}), STABLE, now=60)
    assert capped.parallelism == {"count": 6} and "maxParallelism" in capped.evaluations["count"].reason
    # excluded by name or id: kept whatever its numbers.
    excluded = decide([SOURCE, COUNT], h, Settings(**{**SETTINGS.__dict__, "excluded_operators": frozenset({"count"})}),
                      STABLE, now=60)
    assert excluded.parallelism == {} and excluded.evaluations["count"].reason.startswith("excluded")
    # minParallelism: an idle vertex (not measurable: utilization 0) goes no lower.
    idle = history({"src": Sample(0, 0, 0, pending_records=0), "count": Sample(0, 0, 0)})
    d = decide([Vertex("src", "s", 3, 128), Vertex("count", "c", 3, 128, inputs=("src",))], idle,
               Settings(**{**SETTINGS.__dict__, "min_parallelism": 2, "scale_down_interval": 0}), STABLE, now=60)
    assert d.evaluations["count"].true_processing_rate == math.inf and d.parallelism == {"src": 2, "count": 2}


def test_dry_run_records_without_acting_and_the_restart_time_is_the_longest_measured():
    h = history({"src": lagging, "count": Sample(10_000, 10_000, 1000)})
    d = decide([SOURCE, COUNT], h, Settings(**{**SETTINGS.__dict__, "dry_run": True}), STABLE, now=60)
    assert d.parallelism == {"count": 16} and not d.act and "dry run" in d.why
    memory = Memory(stable_since=-1000.0, restart_times=(30.0, 90.0, 45.0))
    assert restart_time(SETTINGS, memory) == 90.0 and restart_time(SETTINGS, STABLE) == 60.0
    d = decide([SOURCE, COUNT], h, SETTINGS, memory, now=60)
    # backlog 1.2M + 30k/s x 90 s = 3.9M over 600 s: +6.5k/s -> 36.5k/s
    assert d.evaluations["src"].target_data_rate == pytest.approx(36_500)


def test_a_loop_s_vertices_take_what_flows_in_now():
    head = Vertex("head", "head", 2, 128, inputs=("src", "body"))
    body = Vertex("body", "body", 2, 128, inputs=("head",))
    h = history({"src": Sample(1000, 1000, 500, pending_records=0), "head": Sample(5000, 5000, 500),
                 "body": Sample(5000, 4000, 500)})
    d = decide([SOURCE, head, body], h, SETTINGS, STABLE, now=60)
    assert d.evaluations["head"].target_data_rate == pytest.approx(5000)
    assert d.evaluations["body"].target_data_rate == pytest.approx(5000)
