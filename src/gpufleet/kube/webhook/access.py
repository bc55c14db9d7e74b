"""Who may use which queue, asked of the API server with SubjectAccessReviews, cached.

The admission decision (:func:`gpufleet.policy.admit_pod`) asks a synchronous
:class:`~gpufleet.policy.AccessReviewer`; this module answers it from :class:`AccessCache`, whose
answers come from ``authorization.k8s.io/v1`` SubjectAccessReviews (verb ``use``, group
``gpufleet.dev``, resource ``queues``, the queue's name, the namespace of the object, and the
user, groups, uid and extra of the admission request) sent through the API port.

An answer is kept for a while (``allowed_ttl`` for yes, the shorter ``denied_ttl`` for no, so that a
new RoleBinding takes effect soon), on the injected clock; at most ``max_entries`` answers are kept
(least recently used dropped first). Identical questions in flight share one review.

:class:`RecordingReviewer` answers from the cache only and records the questions it could not
answer; the server asks those, then decides again (the decision stays a pure function of the
request, the cluster state and the answers).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.domain import API_GROUP, QueueName
from gpufleet.kube.client.port import Clock, ClusterApi

__all__ = ["AccessCache", "AccessQuestion", "RecordingReviewer", "access_review"]

log = logging.getLogger("gpufleet.webhook")

SAR_API_VERSION = "authorization.k8s.io/v1"


@dataclass(frozen=True, slots=True)
class AccessQuestion:
    """May ``user`` (of ``groups``) use ``queue`` for objects of ``namespace``? ``uid`` and
    ``extra`` go into the review but not into the cache key."""

    user: str
    groups: tuple[str, ...]
    queue: QueueName
    namespace: str
    uid: str = field(default="", compare=False)
    extra: tuple[tuple[str, tuple[str, ...]], ...] = field(default=(), compare=False)


def access_review(question: AccessQuestion) -> dict[str, Any]:
    """The SubjectAccessReview that asks ``question``."""
    spec: dict[str, Any] = {
        "resourceAttributes": {"namespace": question.namespace, "verb": "use", "group": API_GROUP,
                               "resource": "queues", "name": question.queue},
        "user": question.user,
        "groups": list(question.groups),
    }
    if question.uid:
        spec["uid"] = question.uid
    if question.extra:
        spec["extra"] = {key: list(values) for key, values in question.extra}
    return {"apiVersion": SAR_API_VERSION, "kind": "SubjectAccessReview", "spec": spec}


class AccessCache:
    """Answers to :class:`AccessQuestion`, from SubjectAccessReviews (see the module docstring)."""

    def __init__(self, api: ClusterApi, clock: Clock, *, allowed_ttl: float = 60.0, denied_ttl: float = 10.0,
                 max_entries: int = 10_000) -> None:
        self.api = api
        self.clock = clock
        self.allowed_ttl = allowed_ttl
        self.denied_ttl = denied_ttl
        self.max_entries = max_entries
        self._answers: OrderedDict[AccessQuestion, tuple[bool, float]] = OrderedDict()
        self._in_flight: dict[AccessQuestion, asyncio.Future[bool]] = {}
        self.reviews_sent = 0

    def __len__(self) -> int:
        return len(self._answers)

    def lookup(self, question: AccessQuestion) -> bool | None:
        """The cached answer while it is fresh, else None."""
        hit = self._answers.get(question)
        if hit is None:
            return None
        allowed, expires = hit
        if self.clock.now() >= expires:
            del self._answers[question]
            return None
        self._answers.move_to_end(question)
        return allowed

    def _store(self, question: AccessQuestion, allowed: bool) -> None:
        ttl = self.allowed_ttl if allowed else self.denied_ttl
        self._answers[question] = (allowed, self.clock.now() + ttl)
        self._answers.move_to_end(question)
        while len(self._answers) > self.max_entries:
            self._answers.popitem(last=False)

    async def ask(self, question: AccessQuestion) -> bool:
        """The answer, from the cache or a SubjectAccessReview (raises ApiError when the review fails)."""
        cached = self.lookup(question)
        if cached is not None:
            return cached
        pending = self._in_flight.get(question)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._in_flight[question] = future
        try:
            self.reviews_sent += 1
            answer = await self.api.create_access_review(access_review(question))
            status = answer.get("status")
            allowed = isinstance(status, dict) and status.get("allowed") is True
            self._store(question, allowed)
            future.set_result(allowed)
            log.debug("access review: %s use queue %s in %s: %s", question.user, question.queue,
                      question.namespace, allowed)
            return allowed
        except BaseException as err:
            future.set_exception(err)
            future.exception()  # retrieved: no "never retrieved" warning when nobody else waits
            raise
        finally:
            del self._in_flight[question]


def _extra_of(user_info: Mapping[str, Any]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    extra = user_info.get("extra")
    if not isinstance(extra, Mapping):
        return ()
    return tuple(sorted((str(k), tuple(str(v) for v in vs) if isinstance(vs, list) else ())
                        for k, vs in extra.items()))


class RecordingReviewer:
    """An :class:`~gpufleet.policy.AccessReviewer` for one admission request: answers from the
    cache, and records (as a no) each question the cache cannot answer yet, in ``missing``."""

    def __init__(self, cache: AccessCache, user_info: Mapping[str, Any]) -> None:
        self.cache = cache
        uid = user_info.get("uid")
        self.uid = uid if isinstance(uid, str) else ""
        self.extra = _extra_of(user_info)
        self.missing: list[AccessQuestion] = []

    def can_use_queue(self, user: str, groups: Sequence[str], queue: QueueName, namespace: str) -> bool:
        question = AccessQuestion(user, tuple(sorted(groups)), queue, namespace, self.uid, self.extra)
        answer = self.cache.lookup(question)
        if answer is None:
            self.missing.append(question)
            return False
        return answer
