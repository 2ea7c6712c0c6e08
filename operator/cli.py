"""``streamjob operator``: run the operator, or print the CRD it serves."""

from __future__ import annotations

import asyncio
import logging
import sys

import click


@click.group(invoke_without_command=True)
@click.option("-n", "--namespace", "namespaces", multiple=True, metavar="NS",
              help="Watch this namespace (repeatable; glob patterns like team-* work).")
@click.option("-A", "--all-namespaces", is_flag=True, help="Watch StreamJobs in every namespace.")
@click.option("--peering", metavar="NAME", default=None,
              help="Leader election among replicas through kopf's peering object NAME (one replica acts, "
                   "the others stand by). Without it the operator runs standalone.")
@click.option("--priority", type=int, default=None, metavar="N",
              help="With --peering: the replica with the highest priority acts (default: random, so two "
                   "replicas never tie; kopf pauses both on a tie).")
@click.option("--peering-lifetime", default=60, show_default=True, metavar="SECONDS",
              help="With --peering: how long a replica's heartbeat counts; a standby takes over this long "
                   "after the active replica dies.")
@click.option("--health-address", default="0.0.0.0:8080", show_default=True, metavar="HOST:PORT",
              help="Liveness at /healthz and Prometheus metrics at /metrics ('off': none).")
@click.option("--delete-timeout", default=300.0, show_default=True,
              help="Seconds a deletion may take (savepoint, pod shutdown) before it finishes regardless.")
@click.option("--idle-interval", default=10.0, show_default=True,
              help="Seconds between observations of a job with nothing in progress.")
@click.option("--max-concurrent-reconciles", default=8, show_default=True, type=click.IntRange(min=1),
              help="Reconcile passes run at once; the others wait in line, changed StreamJobs first.")
@click.option("--kubernetes-master", default=None, metavar="k8s://URL",
              help="The API server as jobs' driver pods reach it, Spark's master in mode kubernetes "
                   "(default: k8s://https://kubernetes.default.svc, from inside the cluster).")
@click.option("-v", "--verbose", is_flag=True)
@click.pass_context
def operator(ctx: click.Context, namespaces: tuple[str, ...], all_namespaces: bool, peering: str | None,
             priority: int | None, peering_lifetime: int, health_address: str, delete_timeout: float,
             idle_interval: float, max_concurrent_reconciles: int, kubernetes_master: str | None,
             verbose: bool) -> None:
    """Run the StreamJob operator (kopf): reconcile StreamJobs into Spark driver pods."""
    if ctx.invoked_subcommand is not None:
        return
    if bool(namespaces) == all_namespaces:
        raise click.UsageError("give --namespace NS (one or more) or --all-namespaces")
    if kubernetes_master is not None and not kubernetes_master.startswith("k8s://"):
        raise click.BadParameter(f"{kubernetes_master!r}: a Spark master URL for Kubernetes starts with k8s://",
                                 param_hint="--kubernetes-master")
    from .runner import run_operator

    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not verbose:  # not a line per handled watch event
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    from .apiserver import OneLineConnectionErrors

    for handler in logging.getLogger().handlers:  # an unreachable API server: one line per retry
        handler.addFilter(OneLineConnectionErrors())
    try:
        asyncio.run(run_operator(namespaces=list(namespaces), clusterwide=all_namespaces, peering=peering,
                                 priority=priority, peering_lifetime=peering_lifetime,
                                 health_address=None if health_address == "off" else health_address,
                                 delete_timeout=delete_timeout, idle_interval=idle_interval,
                                 max_concurrent_reconciles=max_concurrent_reconciles,
                                 kubernetes_master=kubernetes_master))
    except KeyboardInterrupt:
        sys.exit(130)


@operator.command()
@click.option("-o", "--output", metavar="FILE", help="Write it to FILE instead of standard output.")
def crd(output: str | None) -> None:
    """The StreamJob CustomResourceDefinition, generated from the models (operator/model.py)."""
    from .crd import crd_yaml, write_crd

    if output:
        write_crd(output)
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(crd_yaml(), nl=False)
