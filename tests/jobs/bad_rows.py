"""A job whose user function fails on row 40, again after every restart, with markup in its message
and in its names (the dashboard must show them as text). It runs until canceled.

    streamjob run tests/jobs/bad_rows.py
"""

from streamjob.runtime import RestartStrategies, StreamExecutionEnvironment
from streamjob.runtime.connectors import DataGenSource, DiscardingSink


def check_row(row):
    if row["i"] == 40:
        raise ValueError("row 40 is <b>not</b> valid <img src=x onerror=\"document.title='pwned'\">")
    return row


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1000, 500))
(env.from_source(DataGenSource(lambda i: {"i": i}, rows_per_second=500), None, "numbers")
    .map(check_row).name("<i>check</i> & parse").sink_to(DiscardingSink()))
env.execute("<script>alert(1)</script> job")
