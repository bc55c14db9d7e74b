"""``gpufleet webhook``: the mutating admission webhook that enforces fractional GPUs on the node
and, with ``--tenancy``, the Project rules at creation (docs/semantics-notes.md, "Admission")."""

from __future__ import annotations

import ssl

import click

from gpufleet.commands.base import Command, CommandError
from gpufleet.commands.logs import configure_logging, log_format_option, log_level_option
from gpufleet.kube import DEFAULT_MPS_HOST_DIR, MutationSettings, ServerSettings, run_server, tls_context

__all__ = ["webhook"]


def _selector(pairs: tuple[str, ...]) -> dict[str, str]:
    selector: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--node-selector")
        selector[key.strip()] = value.strip()
    return selector


@click.command(cls=Command)
@click.option("--host", default="0.0.0.0", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8443, show_default=True)
@click.option("--cert-file", type=click.Path(dir_okay=False), default=None,
              help="PEM certificate (chain) for HTTPS; re-read when it changes.")
@click.option("--key-file", type=click.Path(dir_okay=False), default=None, help="PEM private key for HTTPS.")
@click.option("--insecure-http", is_flag=True,
              help="Serve plain HTTP without a key pair (local tests only: the API server calls HTTPS only).")
@click.option("--gpu-memory-mib", type=click.IntRange(min=1), default=None,
              help="For fleets whose GPUs all have this much memory: deny at admission a gpu-memory pod "
                   "that asks more than one GPU (the MPS limits come from gpufleet's device plugin).")
@click.option("--mps-host-dir", default=DEFAULT_MPS_HOST_DIR, show_default=True,
              help="The MPS DaemonSet's host directory (<dir>/gpu-<i>/{pipe,shm,log}): hostPath volumes "
                   "reaching it are refused.")
@click.option("--node-selector", "node_selector", multiple=True, metavar="KEY=VALUE",
              help="Add to fractional pods' nodeSelector (where the MPS DaemonSet runs); repeatable.")
@click.option("--runtime-class", default=None, help="spec.runtimeClassName for fractional pods that set none.")
@log_level_option
@log_format_option
@click.option("--tenancy", is_flag=True,
              help="Check pods of gpufleet's and PodGroups against the Projects at creation, record the "
                   "submitter, and grant queues by SubjectAccessReview (reads the cluster).")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None,
              help="With --tenancy: kubeconfig file (default: in-cluster service account, $KUBECONFIG).")
@click.option("--server", "api_server", default=None, help="With --tenancy: API server URL without credentials.")
@click.option("--access-ttl", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="Seconds a SubjectAccessReview that allowed a queue is reused.")
@click.option("--access-denied-ttl", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="Seconds a SubjectAccessReview that refused a queue is reused.")
@click.option("--trusted-controller", "trusted_controllers", multiple=True, metavar="USER",
              help="Read with --tenancy (ignored without): a workload controller's user whose pods "
                   "(Jobs, ReplicaSets) keep the submitted-by and queue-grant copied from their template; "
                   "repeatable. Default: "
                   "kube-controller-manager's job-, cronjob-, replicaset-, deployment- and "
                   "statefulset-controller.")
def webhook(host: str, port: int, cert_file: str | None, key_file: str | None, insecure_http: bool,
            gpu_memory_mib: int | None, mps_host_dir: str, node_selector: tuple[str, ...],
            runtime_class: str | None, log_level: str, log_format: str, tenancy: bool, kubeconfig: str | None,
            api_server: str | None, access_ttl: float, access_denied_ttl: float,
            trusted_controllers: tuple[str, ...]) -> None:
    """Serve the admission webhook: fractional-GPU pods get their gpufleet.dev/mps-share, pods that
    choose their own GPUs are refused.

    POST /mutate and POST /validate take an admission.k8s.io/v1 AdmissionReview; GET /healthz answers
    "ok", GET /readyz too once the cluster has been read. See docs/fractional-gpus.md.
    """
    if bool(cert_file) != bool(key_file):
        raise CommandError("--cert-file and --key-file go together")
    if not cert_file and not insecure_http:
        raise CommandError("--cert-file and --key-file are required (the API server calls webhooks over HTTPS "
                           "only); --insecure-http serves plain HTTP for local tests")
    if not mps_host_dir.startswith("/"):
        raise CommandError(f"--mps-host-dir must be an absolute path, got {mps_host_dir!r}")
    configure_logging(log_level, log_format)
    if cert_file and key_file:
        try:  # fail here, in one line, rather than inside the server's start-up
            tls_context(cert_file, key_file)
        except (OSError, ssl.SSLError) as err:
            raise CommandError(f"cannot load the key pair {cert_file}, {key_file}: {err}") from None
    settings = MutationSettings(
        mps_host_dir=mps_host_dir,
        gpu_memory_mib=gpu_memory_mib,
        node_selector=_selector(node_selector),
        runtime_class=runtime_class or None,
    )
    service = None
    if tenancy:
        from gpufleet.kube import ClusterAccessError, RealClock, connect
        from gpufleet.kube.webhook.service import TenancyService

        try:
            api = connect(kubeconfig, server=api_server)
        except ClusterAccessError as err:
            raise CommandError(str(err), exit_code=err.exit_code) from None
        from gpufleet.policy.admission import DEFAULT_TRUSTED_CONTROLLERS

        service = TenancyService(api, RealClock(), allowed_ttl=access_ttl, denied_ttl=access_denied_ttl,
                                 trusted_controllers=trusted_controllers or DEFAULT_TRUSTED_CONTROLLERS)
    elif kubeconfig or api_server:
        raise CommandError("--kubeconfig and --server go with --tenancy")
    try:
        run_server(ServerSettings(host=host, port=port, cert_file=cert_file, key_file=key_file), settings, service)
    except OSError as err:  # the port is taken, the address is not ours, ...
        raise CommandError(f"cannot serve on {host}:{port}: {err.strerror or err}", exit_code=1) from None
