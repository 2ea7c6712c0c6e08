"""The ``streamjob`` command line."""

from __future__ import annotations

import os
import runpy
import sys
import traceback

import click
from rich.console import Console

from .config import ConfigError, Configuration, Options

err = Console(stderr=True, highlight=False)


def _fail(message: str, code: int = 1) -> None:
    err.print(f"[bold red]error:[/] {message}", markup=True, soft_wrap=True)
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="streamjob")
def main() -> None:
    """Flink-grade fault tolerance for Python streaming jobs, run on Spark."""


@main.command(context_settings={"ignore_unknown_options": False})
@click.argument("job_file", type=click.Path(dir_okay=False))
@click.option("-p", "--parallelism", type=click.IntRange(min=1), help="Default parallelism of the job's operators.")
@click.option("--master", help="Spark master: local[N] (default, N = parallelism), spark://..., k8s://...")
@click.option("--conf", "confs", multiple=True, metavar="KEY=VALUE", help="Configuration (spark.* goes to Spark). Repeatable.")
@click.option("--from-checkpoint", "from_checkpoint", metavar="PATH",
              help="Resume from a retained checkpoint: a chk-<n> directory, or a job's checkpoint directory (newest).")
@click.option("--no-progress", is_flag=True, help="No live progress table; the summary is still printed.")
@click.argument("job_args", nargs=-1, type=click.UNPROCESSED)
def run(job_file: str, parallelism: int | None, master: str | None, confs: tuple[str, ...], from_checkpoint: str | None,
        no_progress: bool, job_args: tuple[str, ...]) -> None:
    """Run JOB_FILE, a Python file that builds a job and calls env.execute()."""
    from .api.environment import execution_context
    from .cluster.executor import JobExecutionError
    from .cluster.spark import ClusterError
    from .checkpoint.metadata import CheckpointFormatError
    from .graph.job_graph import JobDefinitionError

    if not os.path.exists(job_file):
        _fail(f"no such job file: {job_file}")
    try:
        conf = Configuration.from_pairs(confs)
    except ConfigError as e:
        _fail(str(e))
    if parallelism is not None:
        conf.set(Options.PARALLELISM, parallelism)
    if master:
        conf.set(Options.SPARK_MASTER, master)
    if from_checkpoint:
        from .checkpoint.metadata import CheckpointFormatError
        from .checkpoint.storage import find_checkpoints

        try:
            find_checkpoints(from_checkpoint)
        except (CheckpointFormatError, ValueError) as e:
            _fail(f"--from-checkpoint: {e}")
        conf.set(Options.RECOVERY_PATH, from_checkpoint)
    execution_context.reset()
    execution_context.configuration = conf
    execution_context.show_progress = False if no_progress else None
    sys.argv = [job_file, *job_args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(job_file)))
    try:
        runpy.run_path(job_file, run_name="__main__")
    except JobExecutionError as e:
        _fail(str(e))
    except (JobDefinitionError, ClusterError, ConfigError, CheckpointFormatError) as e:
        _fail(f"{job_file}: {e}")
    except SystemExit:
        raise
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except BaseException as e:  # an error in the job file itself
        tb = traceback.extract_tb(e.__traceback__)
        user = [f for f in tb if os.path.abspath(f.filename) == os.path.abspath(job_file)]
        where = f" (line {user[-1].lineno})" if user else ""
        detail = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        _fail(f"{job_file}{where}: {type(e).__name__}: {e}\n\n{detail}")
    executed = [env for env in execution_context.environments if env._executed]
    if not executed:
        built = any(env._transformations for env in execution_context.environments)
        hint = "it defines streams but never calls env.execute()" if built else "it never creates a StreamExecutionEnvironment and calls env.execute()"
        _fail(f"{job_file} built no job: {hint}")


if __name__ == "__main__":  # pragma: no cover
    main()
