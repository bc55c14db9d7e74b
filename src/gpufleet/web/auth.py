"""The dashboard behind the API server's authentication: :class:`KubeAuthorizer`.

Who: a bearer token (``Authorization: Bearer <token>``) is checked with an
``authentication.k8s.io/v1`` TokenReview; or, only when the dashboard is told to trust the proxy in
front of it (``trust_proxy``), the user and groups that proxy forwards (``X-Forwarded-User``,
``X-Forwarded-Groups``: comma-separated or repeated). Without ``trust_proxy`` those headers are
ignored, whoever sent them. A bearer token wins over forwarded headers.

What: SubjectAccessReviews (``authorization.k8s.io/v1``) for that user, its groups, uid and extra:
``get`` on ``projects`` and ``queues`` in ``gpufleet.dev`` without a name (every one: the
:class:`~gpufleet.web.access.Visibility` is ``all``) or, when that is refused, one per Project and
Queue name; ``admin`` is ``create`` on ``simulations`` in ``gpufleet.dev`` (a resource that is never
stored: the verb the ``gpufleet-platform-admin`` ClusterRole grants for the what-if page). Names
come from ``catalog`` when given, else from listing the Projects and Queues with the dashboard's
own credentials.

Answers: no credential, a token that is not a bearer token, and a token the API server does not
authenticate are 401 (one line, ``WWW-Authenticate: Bearer``); a caller that may see no project
and no queue and is no admin is 403; an API server that cannot answer is 503. Answers are kept
for ``ttl`` seconds (refusals for ``denied_ttl``) on the injected clock, keyed by the token's
SHA-256 or the user and groups, at most ``max_entries`` of each (least recently used dropped
first); identical questions in flight share one review.

The dashboard's ServiceAccount needs ``create`` on ``tokenreviews`` and ``subjectaccessreviews``
and, without a ``catalog``, ``list`` on gpufleet.dev ``projects`` and ``queues``.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from starlette.exceptions import HTTPException
from starlette.requests import Request

from gpufleet.domain import API_GROUP
from gpufleet.kube import ApiError, Clock, ClusterApi, Kind, RealClock, access_error, connect
from gpufleet.web.access import Visibility

__all__ = ["ADMIN_RESOURCE", "ADMIN_VERB", "Identity", "KubeAuthorizer", "kube_authorizer"]

ADMIN_VERB = "create"
ADMIN_RESOURCE = "simulations"  # never stored: `create` on it is the what-if page's permission
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="gpufleet"'}

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
Catalog = Callable[[], Awaitable[tuple[Collection[str], Collection[str]]]]


@dataclass(frozen=True, slots=True)
class Identity:
    """A caller as the API server knows it (a TokenReview's ``status.user``, or a trusted proxy's headers)."""

    user: str
    groups: tuple[str, ...]
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


class _Answers(Generic[K, V]):
    """Answers kept for a while on a clock; concurrent askers of one key share one computation."""

    def __init__(self, clock: Clock, max_entries: int) -> None:
        self.clock = clock
        self.max_entries = max_entries
        self._kept: OrderedDict[K, tuple[asyncio.Future[V], float]] = OrderedDict()

    async def get(self, key: K, make: Callable[[], Awaitable[V]], ttl: Callable[[V], float]) -> V:
        hit = self._kept.get(key)
        if hit is not None and (not hit[0].done() or self.clock.now() < hit[1]):
            self._kept.move_to_end(key)
            return await asyncio.shield(hit[0])
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._kept[key] = (future, float("inf"))
        self._kept.move_to_end(key)
        try:
            value = await make()
        except BaseException as err:
            if self._kept.get(key, (None,))[0] is future:
                del self._kept[key]
            future.set_exception(err)
            future.exception()  # retrieved: no warning when nobody else waited
            raise
        future.set_result(value)
        if self._kept.get(key, (None,))[0] is future:
            self._kept[key] = (future, self.clock.now() + ttl(value))
        while len(self._kept) > self.max_entries:
            self._kept.popitem(last=False)
        return value


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _extra(user: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    extra = user.get("extra") if isinstance(user, dict) else None
    if not isinstance(extra, dict):
        return ()
    return tuple(sorted((str(k), tuple(str(v) for v in vs) if isinstance(vs, list) else ()) for k, vs in extra.items()))


class KubeAuthorizer:
    """An :class:`~gpufleet.web.access.Authorizer` asking the API server (see the module docstring)."""

    def __init__(self, api: ClusterApi | None, clock: Clock, *, connect: Callable[[], ClusterApi] | None = None,
                 trust_proxy: bool = False,
                 user_header: str = "X-Forwarded-User", groups_header: str = "X-Forwarded-Groups",
                 audiences: Sequence[str] = (), catalog: Catalog | None = None, ttl: float = 30.0,
                 denied_ttl: float = 5.0, max_entries: int = 10_000, concurrency: int = 16) -> None:
        if (api is None) == (connect is None):
            raise ValueError("KubeAuthorizer: give an API port or a function that connects one, one of the two")
        self._api = api
        self._connect = connect  # makes the port on first use (in the server's event loop)
        self.clock = clock
        self.trust_proxy = trust_proxy
        self.user_header = user_header
        self.groups_header = groups_header
        self.audiences = tuple(audiences)
        self.catalog = catalog if catalog is not None else self._listed_names
        self.ttl = ttl
        self.denied_ttl = denied_ttl
        self._tokens: _Answers[str, Identity | str] = _Answers(clock, max_entries)
        self._visibility: _Answers[tuple[str, tuple[str, ...]], Visibility | None] = _Answers(clock, max_entries)
        self._names: _Answers[str, tuple[Collection[str], Collection[str]]] = _Answers(clock, 1)
        self._reviews = asyncio.Semaphore(concurrency)
        self.reviews_sent = 0  # TokenReviews and SubjectAccessReviews, for tests of the cache

    @property
    def api(self) -> ClusterApi:
        if self._api is None:
            assert self._connect is not None
            self._api = self._connect()
        return self._api

    # ------------------------------------------------------------------------------ the protocol

    async def visible(self, request: Request) -> Visibility:
        identity = await self.identity(request)
        visibility = await self._visibility.get(
            (identity.user, identity.groups), lambda: self._decide(identity),
            lambda v: self.ttl if v is not None else self.denied_ttl)
        if visibility is None:
            raise HTTPException(403, f"user {identity.user} may get no gpufleet.dev project or queue")
        return visibility

    async def identity(self, request: Request) -> Identity:
        """Who sent ``request`` (HTTPException 401 when nobody the API server knows, 503 when it cannot say)."""
        header = request.headers.get("authorization")
        if header is not None:
            scheme, _, token = header.strip().partition(" ")
            token = token.strip()
            if scheme.lower() != "bearer" or not token:
                raise HTTPException(401, "the Authorization header is not a bearer token", _CHALLENGE)
            key = hashlib.sha256(token.encode()).hexdigest()
            answer = await self._tokens.get(key, lambda: self._review_token(token),
                                            lambda a: self.ttl if isinstance(a, Identity) else self.denied_ttl)
            if isinstance(answer, str):
                raise HTTPException(401, f"the bearer token was refused: {answer}", _CHALLENGE)
            return answer
        if self.trust_proxy:
            user = (request.headers.get(self.user_header) or "").strip()
            if user:
                groups = sorted({g.strip() for h in request.headers.getlist(self.groups_header)
                                 for g in h.split(",") if g.strip()})
                return Identity(user, tuple(groups))
        raise HTTPException(401, "no credentials: send Authorization: Bearer <token>", _CHALLENGE)

    # ------------------------------------------------------------------------------ the reviews

    def _unavailable(self, what: str, err: ApiError) -> HTTPException:
        return HTTPException(503, _one_line(str(access_error(self.api.server, what, err))))

    async def _review_token(self, token: str) -> Identity | str:
        """The token's user, or why the API server did not authenticate it."""
        spec: dict[str, Any] = {"token": token}
        if self.audiences:
            spec["audiences"] = list(self.audiences)
        status = await self._send("review a bearer token", self.api.create_token_review,
                                  {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec})
        user = status.get("user")
        name = user.get("username") if isinstance(user, dict) else None
        if status.get("authenticated") is not True or not isinstance(name, str) or not name:
            return _one_line(str(status.get("error") or "not authenticated by the API server"))
        assert isinstance(user, dict)
        groups = user.get("groups")
        return Identity(name, tuple(sorted(str(g) for g in groups)) if isinstance(groups, list) else (),
                        str(user.get("uid") or ""), _extra(user))

    async def _allowed(self, who: Identity, verb: str, resource: str, name: str = "") -> bool:
        attributes = {"verb": verb, "group": API_GROUP, "resource": resource}
        if name:
            attributes["name"] = name
        spec: dict[str, Any] = {"resourceAttributes": attributes, "user": who.user, "groups": list(who.groups)}
        if who.uid:
            spec["uid"] = who.uid
        if who.extra:
            spec["extra"] = {key: list(values) for key, values in who.extra}
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        status = await self._send("review access", self.api.create_access_review, review)
        return status.get("allowed") is True

    async def _send(self, what: str, create: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
                    review: dict[str, Any]) -> dict[str, Any]:
        """The API server's answer (``status``) to one review (HTTPException 503 when it gives none)."""
        self.reviews_sent += 1
        try:
            async with self._reviews:
                answer = await create(review)
        except ApiError as err:
            raise self._unavailable(what, err) from None
        status = answer.get("status")
        return status if isinstance(status, dict) else {}

    async def _decide(self, who: Identity) -> Visibility | None:
        """``who``'s Visibility, None when it may see nothing."""
        admin, all_projects, all_queues = await asyncio.gather(
            self._allowed(who, ADMIN_VERB, ADMIN_RESOURCE), self._allowed(who, "get", "projects"),
            self._allowed(who, "get", "queues"))
        if all_projects and all_queues:
            return Visibility(all=True, admin=admin)
        projects, queues = await self._names.get("", self.catalog, lambda _: self.ttl)

        async def granted(resource: str, names: Collection[str], every: bool) -> frozenset[str]:
            if every:
                return frozenset(names)
            ordered = sorted(names)
            answers = await asyncio.gather(*(self._allowed(who, "get", resource, n) for n in ordered))
            return frozenset(n for n, yes in zip(ordered, answers, strict=True) if yes)

        seen_projects, seen_queues = await asyncio.gather(
            granted("projects", projects, all_projects), granted("queues", queues, all_queues))
        if not (seen_projects or seen_queues or admin):
            return None
        return Visibility(all=False, projects=seen_projects, queues=seen_queues, admin=admin)

    async def _listed_names(self) -> tuple[Collection[str], Collection[str]]:
        """Every Project's and Queue's name, listed with the dashboard's own credentials."""
        names: list[frozenset[str]] = []
        for kind in (Kind.PROJECT, Kind.QUEUE):
            try:
                items = (await self.api.list(kind)).items
            except ApiError as err:
                if err.status != 404:  # 404: the CRD is not installed, so there are none
                    raise self._unavailable(f"list {kind.plural}", err) from None
                items = []
            names.append(frozenset(str((o.get("metadata") or {}).get("name") or "") for o in items) - {""})
        return names[0], names[1]


def kube_authorizer(kubeconfig: str | None = None, context: str | None = None, **options: Any) -> KubeAuthorizer:
    """The authorizer of ``gpufleet dashboard --auth kube``: the API server of ``kubeconfig`` and
    ``context`` (default: the in-cluster ServiceAccount, then ``$KUBECONFIG``), connected on first use;
    ``options`` as :class:`KubeAuthorizer`'s (``trust_proxy``, ``audiences``, ...)."""
    return KubeAuthorizer(None, RealClock(), connect=lambda: connect(kubeconfig, context=context, field_manager=None),
                          **options)
