"""``gpufleet manifests``: the Kubernetes objects that install gpufleet without Helm."""

from __future__ import annotations

import re
from pathlib import Path

import click

from gpufleet.commands.base import Command, CommandError
from gpufleet.kube import (
    DEFAULT_IMAGE,
    DEFAULT_NAMESPACE,
    InstallOptions,
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
@click.option("--update-chart", "chart_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Instead of printing: rewrite the generated files (CRDs, RBAC rules) of the Helm chart "
                   "in this directory, e.g. deploy/helm/gpufleet.")
def manifests(
    namespace: str, image: str, examples: bool, webhook: bool, webhook_tenancy: bool, admission_policy: bool,
    crds_only: bool, chart_dir: Path | None, webhook_gpu_visibility: bool = True,
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
                             webhook_gpu_visibility=webhook_gpu_visibility)
    click.echo(render_manifests(options, rules), nl=False)
