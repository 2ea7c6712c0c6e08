"""The ``streamjob`` command line."""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from typing import Any

import click

from .cluster import spark_log
from .cluster.tracebacks import hide_engine_frames
from .config import ConfigError, Configuration, Options
from .detach import DETACHED_CHILD_ENV
from .startup_trace import mark

LOG_LEVELS = spark_log.LEVELS
VERBOSE_ENV = spark_log.VERBOSE_ENV

_err = None


def err() -> Any:
    """The stderr console (rich loads on first use, not before every job starts)."""
    global _err
    if _err is None:
        from rich.console import Console

        _err = Console(stderr=True, highlight=False)
    return _err


def _fail(message: str, code: int = 1, conf: Configuration | None = None) -> None:
    from rich.text import Text

    # The message is the user's (paths, job names, exception text): never read as markup.
    err().print(Text.assemble(("error:", "bold red"), " ", message), soft_wrap=True)
    if conf is not None:
        _leave_termination_message(conf, message)
    sys.exit(code)


def _leave_termination_message(conf: Configuration, message: str) -> None:
    """In a pod, a job that cannot even start leaves its reason where the operator reads it."""
    from .cluster import pod

    path = pod.termination_log_path(conf)
    if path:
        try:
            pod.write_termination_message(path, {"state": "FAILED", "error": message, "final_savepoint": None})
        except OSError:
            pass


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="streamjob")
def main() -> None:
    """Flink-grade fault tolerance for Python streaming jobs, run on Spark."""


class _RunCommand(click.Command):
    """``run``: an unknown option after the job file is most likely the job's own argument."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given = list(args)  # click's parser consumes the list it is given
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as e:
            at = given.index(e.option_name) if e.option_name in given else -1
            if not e.possibilities and any(a.endswith(".py") for a in given[:max(at, 0)]):
                e.message = (f"No such option {e.option_name!r} of streamjob run: the job's own arguments go "
                             f"after `--` (streamjob run JOB_FILE [OPTIONS] -- {e.option_name} ...).")
            raise


@main.command(cls=_RunCommand, context_settings={"ignore_unknown_options": False})
@click.argument("job_file", type=click.Path(dir_okay=False), required=False)
@click.option("-m", "--module", metavar="MODULE", help="Run the job in this importable module (as python -m) "
                                                       "instead of JOB_FILE.")
@click.option("--conf-file", metavar="FILE", help="key=value lines (a job.conf); --conf and flags win over it.")
@click.option("-p", "--parallelism", type=click.IntRange(min=1), help="Default parallelism of the job's operators.")
@click.option("--master", help="Spark master: local[N] (default, N = the slots the job needs: the largest parallelism of its "
                   "operators, summed over slot sharing groups), spark://..., k8s://...")
@click.option("--conf", "confs", multiple=True, metavar="KEY=VALUE", help="Configuration (spark.* goes to Spark). Repeatable.")
@click.option("--from-checkpoint", "from_checkpoint", metavar="PATH",
              help="Resume from a retained checkpoint: a chk-<n> directory, a job's checkpoint directory (its "
                   "newest), or the base checkpoint directory (the newest job's newest).")
@click.option("-s", "--from-savepoint", "from_savepoint", metavar="PATH",
              help="Start from a savepoint (at any parallelism, on either state backend).")
@click.option("-n", "--allow-non-restored-state", is_flag=True,
              help="Drop state of operators (uids) the job no longer has, instead of refusing to start.")
@click.option("--allow-older-checkpoint", is_flag=True,
              help="When the newest completed checkpoint cannot be read, restore an older one, accepting that "
                   "the output the newest one committed is written again (execution.state-recovery."
                   "allow-older-checkpoint); without it the job fails.")
@click.option("--rest-address", metavar="HOST:PORT",
              help="Where the REST API and /metrics listen (default 127.0.0.1, in a pod 0.0.0.0, and a free port; "
                   "'off': none).")
@click.option("--no-progress", is_flag=True, help="No live progress table; the summary is still printed.")
@click.option("-d", "--detached", is_flag=True,
              help="Start the job in the background, print its id and REST API, and return (as `flink run -d`); "
                   "its output goes to a log file; `streamjob list` shows it.")
@click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False), metavar="LEVEL",
              help="Spark's (the JVM's) log level: " + ", ".join(LOG_LEVELS) + " (default: error with local "
                   "Spark, Spark's own otherwise).")
@click.option("-v", "--verbose", is_flag=True,
              help="Show tracebacks whole: streamjob's, PySpark's, runpy's and Java's frames too, and the JVM's "
                   "start-up lines.")
@click.argument("job_args", nargs=-1, type=click.UNPROCESSED)
def run(job_file: str | None, module: str | None, conf_file: str | None, parallelism: int | None, master: str | None,
        confs: tuple[str, ...], from_checkpoint: str | None, from_savepoint: str | None, allow_non_restored_state: bool,
        allow_older_checkpoint: bool, rest_address: str | None, no_progress: bool, detached: bool,
        log_level: str | None, verbose: bool, job_args: tuple[str, ...]) -> None:
    """Run JOB_FILE, a Python file that builds a job and calls env.execute() (or --module MODULE).

    Arguments after JOB_FILE are the job's (its sys.argv[1:]); put `--` before them when one starts
    with `-` and could be taken for a streamjob option: `streamjob run job.py -- --input in.txt`."""
    mark("cli")
    _end_on_sigterm()
    try:
        _run(job_file, module, conf_file, parallelism, master, confs, from_checkpoint, from_savepoint,
             allow_non_restored_state, allow_older_checkpoint, rest_address, no_progress, detached, log_level,
             verbose, job_args)
    except KeyboardInterrupt as e:  # outside a running job (a running one counts signals: see cluster.interrupts)
        # Anywhere before the job runs: the imports, the job file, its graph (click would say "Aborted!", exit 1).
        from .cluster import spark
        from .cluster.interrupts import Terminated

        spark.abandon_prestart()  # its JVM would otherwise outlive this process until it has started
        name, code = ("SIGTERM", 143) if isinstance(e, Terminated) else ("Ctrl-C", 130)
        _fail(f"interrupted by {name} while no job was running (it left nothing to resume)", code)


def _run(job_file: str | None, module: str | None, conf_file: str | None, parallelism: int | None,
         master: str | None, confs: tuple[str, ...], from_checkpoint: str | None, from_savepoint: str | None,
         allow_non_restored_state: bool, allow_older_checkpoint: bool, rest_address: str | None, no_progress: bool,
         detached: bool, log_level: str | None, verbose: bool, job_args: tuple[str, ...]) -> None:
    if verbose:
        os.environ[VERBOSE_ENV] = "1"
    if log_level:
        os.environ[spark_log.LEVEL_ENV] = log_level.upper()
    try:
        conf = Configuration.from_file(conf_file) if conf_file else Configuration()
        conf.update(Configuration.from_pairs(confs))
        conf.validate()  # before the JVM starts: a typo costs nothing (the job's own settings are checked too)
    except ConfigError as e:
        _fail(str(e))
    if module and job_file:  # with --module every positional argument is the job's
        job_file, job_args = None, (job_file, *job_args)
    if bool(job_file) == bool(module):
        _fail("give a JOB_FILE or --module MODULE (one of them)", 2, conf)
    if job_file and not os.path.exists(job_file):
        near = _near_miss(job_file)
        _fail(f"no such job file: {job_file}" + (f" (did you mean {near}?)" if near else ""), conf=conf)
    found = None
    if module:
        import importlib.util

        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError) as e:
            found, module = None, f"{module} ({e})"
        if found is None:
            _fail(f"no such module: {module}", conf=conf)
    if parallelism is not None:
        conf.set(Options.PARALLELISM, parallelism)
    from .cluster import resume

    resume.run_options = [*(["-p", str(parallelism)] if parallelism is not None else []),
                          *(["--master", master] if master else []),
                          *(["--conf-file", conf_file] if conf_file else []),
                          *(a for c in confs for a in ("--conf", c))]
    if master:
        try:
            spark_log.check_master_syntax(master)
        except spark_log.MasterURLError as e:
            _fail(f"--master: {e}", 2, conf)
        conf.set(Options.SPARK_MASTER, master)
    if from_checkpoint is not None and from_savepoint is not None:
        _fail("--from-checkpoint and --from-savepoint: give one")
    for flag, given in (("--from-checkpoint", from_checkpoint), ("--from-savepoint", from_savepoint)):
        if given is not None and not given.strip():  # an unset shell variable: not "start from nothing"
            _fail(f"{flag}: the path is empty", 2, conf)
    try:  # an unreachable standalone master: one line now, before the job file runs and a JVM starts
        spark_log.probe_standalone_master(str(conf.get(Options.SPARK_MASTER) or ""))
    except spark_log.MasterURLError as e:
        _fail(str(e), conf=conf)
    if detached and not os.environ.get(DETACHED_CHILD_ENV):
        from .detach import run_detached

        sys.exit(run_detached(rest_address))
    # As early as the Spark configuration is known: everything imported from here on overlaps the JVM's start.
    _prestart_jvm(conf)
    from .api.environment import execution_context
    from .cluster.executor import JobCanceledError, JobExecutionError, JobInterrupted
    from .cluster.spark import ClusterError
    from .checkpoint.metadata import CheckpointFormatError
    from .graph.job_graph import JobDefinitionError

    if from_checkpoint or from_savepoint:
        from .checkpoint import filesystems

        filesystems.configure(conf)
        from .checkpoint.storage import find_checkpoints

        flag = "--from-checkpoint" if from_checkpoint else "--from-savepoint"
        path = from_checkpoint or from_savepoint
        try:
            find_checkpoints(path)  # type: ignore[arg-type]
        except (CheckpointFormatError, ValueError) as e:
            _fail(f"{flag}: {e}", conf=conf)
        except Exception as e:  # noqa: BLE001 - the storage itself: no credentials, no such bucket, no HDFS client
            _fail(f"{flag}: cannot read {path}: {type(e).__name__}: {str(e).strip() or 'no detail'}", conf=conf)
        conf.set(Options.RECOVERY_PATH, from_checkpoint or from_savepoint)
    if allow_non_restored_state:
        conf.set(Options.ALLOW_NON_RESTORED_STATE, True)
    if allow_older_checkpoint:
        conf.set(Options.ALLOW_OLDER_CHECKPOINT, True)
    if rest_address:
        conf.set(Options.REST_ADDRESS, rest_address)
    execution_context.reset()
    execution_context.configuration = conf
    execution_context.show_progress = False if no_progress else None
    execution_context.show_summary = True  # as --no-progress's help says: only the live table goes
    what = job_file or module
    source = os.path.abspath(job_file) if job_file else found.origin
    sys.argv = [source or what, *job_args]
    if job_file:
        sys.path.insert(0, os.path.dirname(source))
    mark("job file")
    try:
        if module:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(job_file, run_name="__main__")
        execution_context.wait_for_async_jobs()  # jobs run in this process: returning now would kill them
    except JobInterrupted as e:  # canceled as the user asked: said plainly, with the signal's exit code
        from rich.text import Text

        err().print(Text(str(e), style="yellow"), soft_wrap=True)
        sys.exit(e.exit_code)
    except JobCanceledError as e:
        click.echo(str(e), err=True)  # as asked: not an error, but the job did not finish
        sys.exit(1)
    except JobExecutionError as e:
        _fail(_frames(str(e)))  # the job manager left its own final result
    except (JobDefinitionError, ClusterError, ConfigError, CheckpointFormatError) as e:
        _fail(f"{what}: {_frames(str(e))}", conf=conf)
    except (SystemExit, KeyboardInterrupt):
        raise  # a KeyboardInterrupt: said by run()
    except BaseException as e:  # an error in the job file itself
        from .api.pyflink_import import PyFlinkImportError
        from .api.unsupported import PyFlinkNotSupported

        tb = traceback.extract_tb(e.__traceback__)
        user = [f for f in tb if source and os.path.abspath(f.filename) == source]
        where = f" (line {user[-1].lineno})" if user else ""
        if isinstance(e, PyFlinkImportError):  # says which line and what to write instead: no traceback
            _fail(f"{what}: {e}", conf=conf)
        if isinstance(e, PyFlinkNotSupported):
            _fail(f"{what}{where}: {e}", conf=conf)
        detail = _frames("".join(traceback.format_exception(type(e), e, e.__traceback__)))
        _fail(f"{what}{where}: {type(e).__name__}: {e}\n\n{detail}", conf=conf)
    executed = [env for env in execution_context.environments if env._executed]
    if not executed:
        built = any(env._transformations for env in execution_context.environments)
        hint = "it defines streams but never calls env.execute()" if built else "it never creates a StreamExecutionEnvironment and calls env.execute()"
        _fail(f"{what} built no job: {hint}", conf=conf)


def _near_miss(path: str) -> str | None:
    """An existing file ``path`` was probably meant to name: each missing part of it replaced by the
    closest name in its folder (``exmaples/word_count.py`` -> ``examples/word_count.py``); None if none is close."""
    import difflib

    parts = [p for p in os.path.normpath(path).split(os.sep) if p]
    current = os.sep if os.path.isabs(path) else ""
    for part in parts:
        candidate = os.path.join(current, part)
        if not os.path.exists(candidate):
            try:
                names = os.listdir(current or ".")
            except OSError:
                return None
            close = difflib.get_close_matches(part, names, n=1, cutoff=0.75)
            if not close:
                return None
            candidate = os.path.join(current, close[0])
        current = candidate
    return current if os.path.isfile(current) and current != os.path.normpath(path) else None


def _end_on_sigterm() -> None:
    """SIGTERM outside a running job ends ``streamjob run`` as Ctrl-C does, saying so (not a silent 143);
    while a job runs, the executor takes both signals over (a graceful stop, then a cancel)."""
    import signal

    from .cluster.interrupts import Terminated

    def terminated(*_: Any) -> None:
        raise Terminated()

    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, terminated)


def _frames(text: str) -> str:
    """A traceback with the user's frames only, unless -v."""
    return text if os.environ.get(VERBOSE_ENV) else hide_engine_frames(text)


def _prestart_jvm(conf: Configuration) -> None:
    """The embedded local Spark's JVM starts launching now, beside the job file's imports and graph
    building (the deployment takes it only if the job changed nothing it was launched with)."""
    from .cluster import pod, spark

    master = pod.spark_master(conf)
    if not spark.is_local(master):
        return
    try:
        spark_conf = pod.spark_conf(conf, os.environ, 1, pod.driver_addresses(conf, os.environ))
    except ConfigError:
        return  # the deployment reports it
    spark_conf.pop("spark.master", None)
    if spark_conf.get("spark.python.use.daemon", "true") != "false":
        from .cluster import process_tree, session, zygote

        # Before the JVM launches: its daemon inherits where it is (a session cluster's: through the stage's
        # settings). At the lowest priority beside a JVM's launch; on a session cluster's, at its own.
        zygote.start(process_tree.DAEMON_MODULE, lower=not session.available(master))
    spark.prestart_gateway(master, spark_conf)


# -- commands against running jobs (list, status, checkpoints, savepoint, stop, cancel) -----------------
from .cli_control import add_commands as _add_control_commands  # noqa: E402 - after main exists

_add_control_commands(main)


@main.command("kafka-dev")
@click.option("--port", default=9092, show_default=True, type=click.IntRange(0, 65535),
              help="The broker's port (0: any free port).")
@click.option("--host", default="127.0.0.1", show_default=True, help="The address it listens on and advertises.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="Keep topics here across runs (default: a temporary dir, removed at exit).")
@click.option("--topic", "topics", multiple=True, metavar="NAME[:PARTITIONS]",
              help="Create this topic at start (if missing). Repeatable.")
def kafka_dev(port: int, host: str, data_dir: str | None, topics: tuple[str, ...]) -> None:
    """Run a real Apache Kafka broker (KRaft, one node) for development, until Ctrl-C.

    Its jars come from Maven Central through mvn the first time (cached in ~/.cache/streamjob,
    or $STREAMJOB_KAFKA_HOME)."""
    import signal
    import time

    from .connectors.kafka import dist
    from .connectors.kafka.broker import KafkaBroker, KafkaBrokerError

    if not dist.is_fetched():
        err().print(f"fetching Apache Kafka {dist.KAFKA_VERSION} from Maven Central into {dist.libs_dir()} ...")

    def progress(line: str) -> None:
        if "Downloaded from" in line or "ERROR" in line:
            err().print(f"  [dim]{line.split(']', 1)[-1].strip()}[/]", markup=True, highlight=False)

    broker = KafkaBroker(data_dir=data_dir, port=port, host=host, progress=progress)
    # SIGTERM (kill, a container stop) ends it as cleanly as Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        err().print(f"starting Apache Kafka {broker.version} (log: {broker.log_file}) ...")
        try:
            broker.start()
        except (KafkaBrokerError, dist.KafkaDistError) as e:
            _fail(str(e))
        for spec in topics:
            name, _, parts = spec.partition(":")
            _create_topic(broker.bootstrap, name, int(parts or 1))
        click.echo(f"Kafka broker ready: bootstrap servers {broker.bootstrap}")
        click.echo("Create a topic:\n"
                   "  python -c \"from confluent_kafka.admin import AdminClient, NewTopic; "
                   f"AdminClient({{'bootstrap.servers': '{broker.bootstrap}'}})"
                   ".create_topics([NewTopic('clicks', 4)])['clicks'].result()\"\n"
                   f"or restart with --topic clicks:4. Read it in a job with KafkaSource.builder()"
                   f".set_bootstrap_servers('{broker.bootstrap}'). Ctrl-C stops the broker.")
        while broker.is_running():
            time.sleep(0.5)
        _fail(f"the Kafka broker exited on its own; see {broker.log_file}")
    except KeyboardInterrupt:
        err().print("stopping the Kafka broker ...")
    finally:
        broker.close()
    click.echo("Kafka broker stopped")


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


@main.group("cluster")
def cluster() -> None:
    """A local session cluster: one Spark JVM kept running, which `streamjob run` on the embedded local
    Spark uses instead of starting its own (its first record comes ~0.8 s sooner)."""


@cluster.command("start")
def cluster_start() -> None:
    """Start the session cluster (a JVM, warmed with one Spark context and stage) and return."""
    from .cluster import session

    err().print("starting the session cluster (a Spark JVM, warmed up) ...")
    try:
        s = session.start()
    except RuntimeError as e:
        _fail(str(e))
    click.echo(f"session cluster running: JVM pid {s.jvm}, log {s.log}. `streamjob run` on local Spark uses it "
               f"(STREAMJOB_SESSION=off: not); `streamjob cluster stop` ends it")


@cluster.command("stop")
def cluster_stop() -> None:
    """Stop the session cluster (a run on it goes on with a JVM of its own)."""
    from .cluster import session

    s = session.stop()
    click.echo("session cluster stopped" if s is not None else "no session cluster was running")


@cluster.command("status")
def cluster_status() -> None:
    """Whether a session cluster runs, and where its log is."""
    import time

    from .cluster import session

    s = session.read()
    if s is None:
        click.echo("no session cluster is running")
        raise SystemExit(1)
    click.echo(f"session cluster running for {time.time() - s.started:.0f} s: JVM pid {s.jvm}, keeper pid {s.keeper}, "
               f"Python {s.python}, log {s.log}")


def _create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    from .connectors.kafka.logs import with_logger

    admin = AdminClient(with_logger({"bootstrap.servers": bootstrap}))
    try:
        admin.create_topics([NewTopic(name, partitions)])[name].result(30)
        click.echo(f"created topic {name} ({partitions} partitions)")
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
        click.echo(f"topic {name} exists")


def _operator_commands() -> None:
    """``streamjob operator``: the Kubernetes operator's commands (loaded only when installed with it)."""
    try:
        from streamjob.operator.cli import operator
    except ImportError:  # pragma: no cover - the operator's dependencies are missing
        return
    main.add_command(operator)


_operator_commands()


def _state_commands() -> None:
    """``streamjob state``: the State Processor API's commands (package streamjob.state: ``ls``, ``dump``)
    and ``query`` (a running job's queryable state)."""
    from streamjob.state.cli import state

    from .cli_state import query

    state.add_command(query)
    main.add_command(state)


_state_commands()

if __name__ == "__main__":  # pragma: no cover
    main()
