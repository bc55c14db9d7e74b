"""``gpufleet manifests``: the Kubernetes objects that install gpufleet without Helm."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

import click

from gpufleet.commands.base import Command, CommandError
from gpufleet.commands.controller import ledger_flags
from gpufleet.kube import (
    DEFAULT_IMAGE,
    DEFAULT_NAMESPACE,
    LEDGER_VOLUMES,
    InstallOptions,
    LedgerInstall,
    controller_rbac_rules,
    render_crds,
    render_manifests,
    write_chart_files,
)

__all__ = ["manifests"]

# A namespace name is an RFC 1123 DNS label.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# An image reference: no whitespace or control characters, nothing YAML could misread.
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]*")
# A Secret's name is an RFC 1123 DNS subdomain.
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
# A Kubernetes quantity such as 5Gi or 500M (a PersistentVolumeClaim's size).
_QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?([EPTGMK]i?|[munk]|e[0-9]+)?")
_DATABASE_HELP = ("a postgresql+psycopg://USER@HOST:5432/DATABASE URL, or the absolute path of an SQLite file in "
                  "the controller's container, e.g. /var/lib/gpufleet/ledger.db")


@click.command(cls=Command)
@click.option("--namespace", default=DEFAULT_NAMESPACE, show_default=True,
              help="Namespace of the controller (and of its leader-election Lease).")
@click.option("--image", default=DEFAULT_IMAGE, show_default=True, help="Container image of gpufleet.")
@click.option("--examples/--no-examples", default=True, show_default=True,
              help="Include the example PriorityClasses (train, build, inference) and Queues.")
@click.option("--webhook", is_flag=True,
              help="Include the fractional-GPU admission webhook; its certificate comes from cert-manager, "
                   "which must be installed (Kubernetes >= 1.28).")
@click.option("--webhook-tenancy/--no-webhook-tenancy", default=True, show_default=True,
              help="With --webhook: its tenancy admission (Projects, queue grants by SubjectAccessReview, "
                   "the submitted-by stamp), with its own ServiceAccount.")
@click.option("--webhook-gpu-visibility/--no-webhook-gpu-visibility", default=True, show_default=True,
              help="With --webhook: refuse pods of every scheduler that choose their own GPUs (the "
                   "ValidatingWebhookConfiguration gpufleet-webhook-gpu-visibility, docs/fractional-gpus.md).")
@click.option("--admission-policy/--no-admission-policy", default=True, show_default=True,
              help="Include the ValidatingAdmissionPolicy that guards gpufleet's pod annotations "
                   "(Kubernetes >= 1.30).")
@click.option("--crds-only", is_flag=True, help="Print only the CRDs (to install or upgrade them apart).")
@click.option("--database", default=None, metavar="URL|PATH",
              help=f"Record the usage ledger: {_DATABASE_HELP} (on a volume: --ledger-volume; one replica). "
                   "As the chart's controller.ledger values.")
@click.option("--cost-centre-labels", "--cost-center-labels", "cost_centre_labels", default="", metavar="KEYS",
              help="Pod label keys (comma-separated) copied onto each ledger interval, e.g. team,cost-center.")
@click.option("--ledger-buffer", type=click.IntRange(1), default=200_000, show_default=True,
              help="Ledger events the controller holds in memory while the database cannot be written.")
@click.option("--ledger-volume", type=click.Choice(LEDGER_VOLUMES), default="pvc", show_default=True,
              help="The SQLite ledger's volume: a PersistentVolumeClaim that outlives the pod, or an emptyDir.")
@click.option("--ledger-volume-size", default="5Gi", show_default=True, help="The SQLite ledger's claim size.")
@click.option("--database-password-secret", default="", metavar="SECRET",
              help="PostgreSQL: a Secret in the namespace whose key 'password' the controller gets as PGPASSWORD.")
@click.option("--telemetry-exporters", default=None, metavar="URLS",
              help="dcgm-exporter /metrics URLs (comma-separated) the controller reads for GPU utilisation.")
@click.option("--telemetry-prometheus", default=None, metavar="URL",
              help="A Prometheus server that scrapes dcgm-exporter, instead of --telemetry-exporters.")
@click.option("--telemetry-interval", type=click.IntRange(1), default=30, show_default=True,
              help="Seconds between the controller's telemetry reads.")
@click.option("--update-chart", "chart_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Instead of printing: rewrite the generated files (CRDs, RBAC rules) of the Helm chart "
                   "in this directory, e.g. deploy/helm/gpufleet.")
def manifests(
    namespace: str, image: str, examples: bool, webhook: bool, webhook_tenancy: bool, admission_policy: bool,
    crds_only: bool, chart_dir: Path | None, webhook_gpu_visibility: bool = True, database: str | None = None,
    cost_centre_labels: str = "", ledger_buffer: int = 200_000, ledger_volume: str = "pvc",
    ledger_volume_size: str = "5Gi", database_password_secret: str = "", telemetry_exporters: str | None = None,
    telemetry_prometheus: str | None = None, telemetry_interval: int = 30,
) -> None:
    """Print everything needed to install gpufleet without Helm, as multi-document YAML.

    CRDs first, then the namespace, RBAC, the controller Deployment, its metrics Service and the
    examples. On a fresh cluster apply the CRDs first, so that the example Queues find their kind:

        gpufleet manifests --crds-only | kubectl apply --server-side -f -

        kubectl wait --for condition=established crd -l app.kubernetes.io/part-of=gpufleet

        gpufleet manifests | kubectl apply --server-side -f -
    """
    if not _DNS_LABEL.fullmatch(namespace):
        raise CommandError(
            f"--namespace: must be a DNS label (lower-case letters, digits and '-', at most 63), got {namespace!r}")
    if not _IMAGE.fullmatch(image):
        raise CommandError(f"--image: not an image reference, got {image!r}")
    ledger = _ledger(database, cost_centre_labels, ledger_buffer, ledger_volume, ledger_volume_size,
                     database_password_secret, telemetry_exporters, telemetry_prometheus, telemetry_interval)
    rules = controller_rbac_rules()
    if chart_dir is not None:
        if not (chart_dir / "Chart.yaml").is_file():
            raise CommandError(f"--update-chart: {chart_dir} has no Chart.yaml")
        before = {path: path.read_bytes() for path in chart_dir.glob("files/*/*") if path.is_file()}
        for path in write_chart_files(chart_dir, rules):
            click.echo(f"{'unchanged' if before.get(path) == path.read_bytes() else 'wrote'} {path}", err=True)
        return
    if crds_only:
        click.echo(render_crds(), nl=False)
        return
    options = InstallOptions(namespace=namespace, image=image, examples=examples, webhook=webhook,
                             admission_policy=admission_policy, webhook_tenancy=webhook_tenancy,
                             webhook_gpu_visibility=webhook_gpu_visibility, ledger=ledger)
    click.echo(render_manifests(options, rules), nl=False)


def _ledger(database: str | None, labels: str, buffer: int, volume: str, size: str, secret: str,
            exporters: str | None, prometheus: str | None, interval: int) -> LedgerInstall | None:
    """The controller's ledger from the flags, read by the controller's own rules (``ledger_flags``)."""
    flags = ledger_flags(database, labels, exporters, prometheus)
    if database is None:
        return None
    text = database.strip()
    path = text.removeprefix("sqlite:///") if text.startswith("sqlite:///") else text
    if text.startswith(("postgresql://", "postgresql+psycopg://")):
        authority = text.partition("://")[2].partition("/")[0]
        if ":" in authority.rpartition("@")[0]:
            raise CommandError("--database: no password in the URL (the Deployment shows it to anyone who reads "
                               "it); use --database-password-secret")
    elif "://" in path or not posixpath.isabs(path) or path.endswith("/") or posixpath.dirname(path) == "/":
        raise CommandError(f"--database: {text!r} is not {_DATABASE_HELP}")
    if not _QUANTITY.fullmatch(size):
        raise CommandError(f"--ledger-volume-size: not a quantity such as 5Gi, got {size!r}")
    if secret and not _DNS_SUBDOMAIN.fullmatch(secret):
        raise CommandError(f"--database-password-secret: not a Secret name, got {secret!r}")
    return LedgerInstall(database=text, cost_centre_labels=flags.cost_centre_labels, buffer_events=buffer,
                         telemetry_exporters=flags.exporters, telemetry_prometheus=flags.prometheus,
                         telemetry_interval=interval, volume=volume, volume_size=size, password_secret=secret)
