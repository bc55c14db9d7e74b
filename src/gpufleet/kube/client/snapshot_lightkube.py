"""The :class:`~gpufleet.kube.inspect.snapshot.ClusterReader` of a real API server, through lightkube.

Every failure becomes one :class:`~gpufleet.kube.inspect.snapshot.ClusterAccessError` line: a kubeconfig
that is missing or unusable (exit 2: the user's input), an API server that cannot be reached or
answers with an error (exit 1). A 404 on a list means the kind is not served (no CRD).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx2
import yaml
from lightkube import ApiError, Client, ConfigError, KubeConfig
from lightkube.generic_resource import create_global_resource, create_namespaced_resource, get_generic_resource
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.scheduling_v1 import PriorityClass

from gpufleet.kube.inspect.snapshot import ClusterAccessError, ObjectKind, ResourceNotServed

__all__ = ["LightkubeCluster", "connect"]

LIST_CHUNK = 500  # objects per list call: large clusters are paged rather than read in one reply


def _generic(kind: ObjectKind) -> Any:
    """The lightkube class of one of gpufleet's kinds (reusing one already registered, e.g. by the
    controller, since lightkube keeps one class per kind)."""
    existing = get_generic_resource(kind.api_version, kind.kind)  # type: ignore[no-untyped-call]  # untyped upstream
    if existing is not None:
        return existing
    group, _, version = kind.api_version.partition("/")
    create = create_namespaced_resource if kind.namespaced else create_global_resource
    return create(group, version, kind.kind, kind.plural)


def _resource(kind: ObjectKind) -> Any:
    if kind is ObjectKind.NODE:
        return Node
    if kind is ObjectKind.POD:
        return Pod
    if kind is ObjectKind.PRIORITY_CLASS:
        return PriorityClass
    return _generic(kind)


def _status_code(err: Exception) -> int | None:
    """The HTTP status of a failed call. lightkube raises ApiError only when the reply's
    Content-Type is exactly ``application/json``; other servers (and proxies) add a charset or send
    text, which arrives as a plain HTTPStatusError: both are read here."""
    if isinstance(err, ApiError) and err.status is not None and err.status.code:
        return int(err.status.code)
    if isinstance(err, httpx2.HTTPStatusError):
        return int(err.response.status_code)
    return None


def _describe_status_error(err: httpx2.HTTPStatusError) -> str:
    if isinstance(err, ApiError) and err.status is not None and err.status.message:
        return f"HTTP {_status_code(err)}: {err.status.message}"
    try:
        message = err.response.json().get("message")
    except (ValueError, AttributeError):
        message = None
    return f"HTTP {err.response.status_code}: {message or err.response.reason_phrase}"


class LightkubeCluster:
    """Reads through a lightkube :class:`~lightkube.Client` (see :func:`connect`)."""

    def __init__(self, client: Client, server: str) -> None:
        self.client = client
        self.server = server

    @property
    def default_namespace(self) -> str:
        return str(self.client.namespace or "default")

    def _failure(self, err: Exception, what: str) -> ClusterAccessError:
        if isinstance(err, httpx2.HTTPStatusError):
            return ClusterAccessError(f"{self.server}: {what}: {_describe_status_error(err)}")
        if isinstance(err, httpx2.TimeoutException):
            return ClusterAccessError(f"{self.server}: {what}: the API server did not answer in time")
        if isinstance(err, httpx2.TransportError):
            detail = str(err) or type(err).__name__
            return ClusterAccessError(f"{self.server}: {what}: cannot reach the API server ({detail})")
        return ClusterAccessError(f"{self.server}: {what}: {type(err).__name__}: {err}")

    def list_objects(self, kind: ObjectKind) -> Iterator[Mapping[str, Any]]:
        resource = _resource(kind)
        what = f"listing {kind.kind} objects"
        try:
            listed = self.client.list(resource, namespace="*", chunk_size=LIST_CHUNK) if kind.namespaced \
                else self.client.list(resource, chunk_size=LIST_CHUNK)
            objects = [obj.to_dict() for obj in listed]
        except (httpx2.HTTPError, OSError) as err:
            if _status_code(err) == 404:
                raise ResourceNotServed(kind.kind) from None
            raise self._failure(err, what) from None
        except Exception as err:  # a reply lightkube cannot decode: still one line, never a traceback
            raise self._failure(err, what) from None
        for obj in objects:
            # list items carry no apiVersion/kind on the wire; the snapshot wants them
            yield {"apiVersion": kind.api_version, "kind": kind.kind, **obj}

    def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            pod = self.client.get(Pod, name, namespace=namespace)
        except (httpx2.HTTPError, OSError) as err:
            if _status_code(err) == 404:
                return None
            raise self._failure(err, f"reading pod {namespace}/{name}") from None
        except Exception as err:  # as in list_objects
            raise self._failure(err, f"reading pod {namespace}/{name}") from None
        result: dict[str, Any] = pod.to_dict()
        return result


def connect(kubeconfig: str | None = None, *, context: str | None = None, timeout_s: float = 10.0) -> LightkubeCluster:
    """A reader for the cluster of ``kubeconfig`` (default: in-cluster, ``$KUBECONFIG``, ``~/.kube/config``)."""
    config: KubeConfig | None = None
    if kubeconfig is not None:
        path = Path(kubeconfig).expanduser()
        if not path.is_file():
            raise ClusterAccessError(f"{kubeconfig}: no such kubeconfig file", exit_code=2)
        try:
            config = KubeConfig.from_file(path)
        except (ConfigError, OSError, UnicodeDecodeError, yaml.YAMLError, ValueError, KeyError, TypeError,
                AttributeError) as err:
            raise ClusterAccessError(f"{kubeconfig}: not a usable kubeconfig: {err}", exit_code=2) from None
    try:
        if config is None and context is not None:  # a context of the default configuration
            config = KubeConfig.from_env()
        single = config.get(context) if config is not None else None
        client = Client(config=single, timeout=httpx2.Timeout(timeout_s)) if single is not None \
            else Client(timeout=httpx2.Timeout(timeout_s))
        server = str(client.config.cluster.server)
    except ConfigError as err:
        where = kubeconfig or "the Kubernetes configuration"
        raise ClusterAccessError(f"{where}: {err}", exit_code=2) from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        where = kubeconfig or "the Kubernetes configuration"
        raise ClusterAccessError(f"{where}: not usable: {type(err).__name__}: {err}", exit_code=2) from None
    return LightkubeCluster(client, server)
