"""The asynchronous side of the tenancy checks: the cluster cache, the SubjectAccessReviews, and
the two-step decision around the pure :func:`~gpufleet.kube.webhook.review.review`.

A request is decided once with the answers the access cache has; if the decision asked questions
the cache could not answer, they are sent as SubjectAccessReviews (at once, in parallel) and the
request is decided again with the answers. So the decision stays a pure function of the request,
the cached state and the reviewers' answers, and a warm cache costs no API call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from gpufleet.kube.client.port import ApiError, Clock, ClusterApi, Kind
from gpufleet.kube.webhook.access import AccessCache, AccessQuestion, RecordingReviewer
from gpufleet.kube.webhook.mutation import MutationSettings
from gpufleet.kube.webhook.review import ADMISSION_API_VERSION, Tenancy, review, wanted_pod_group
from gpufleet.kube.webhook.state import AdmissionState
from gpufleet.policy.admission import DEFAULT_TRUSTED_CONTROLLERS

__all__ = ["NotReady", "TenancyService"]

log = logging.getLogger("gpufleet.webhook")


class NotReady(Exception):
    """The cluster cache has not been filled yet (the server answers 503)."""


class TenancyService:
    """The webhook's view of the cluster and its access answers (see the module docstring)."""

    def __init__(self, api: ClusterApi, clock: Clock, *, allowed_ttl: float = 60.0, denied_ttl: float = 10.0,
                 max_entries: int = 10_000, sync_timeout: float = 10.0,
                 trusted_controllers: Iterable[str] = DEFAULT_TRUSTED_CONTROLLERS) -> None:
        self.api = api
        self.trusted = frozenset(trusted_controllers)
        self.state = AdmissionState(api, clock)
        self.access = AccessCache(api, clock, allowed_ttl=allowed_ttl, denied_ttl=denied_ttl,
                                  max_entries=max_entries)
        self.sync_timeout = sync_timeout

    async def start(self) -> None:
        await self.state.start()

    async def stop(self) -> None:
        await self.state.stop()
        await self.api.close()

    @property
    def ready(self) -> bool:
        return self.state.synced.is_set()

    def _decide(self, body: object, settings: MutationSettings,
                validate: bool) -> tuple[dict[str, Any], list[AccessQuestion]]:
        reviewers: list[RecordingReviewer] = []

        def reviewer_for(user_info: Mapping[str, Any]) -> RecordingReviewer:
            reviewer = RecordingReviewer(self.access, user_info)
            reviewers.append(reviewer)
            return reviewer

        answer = review(body, settings, Tenancy(self.state.context(), reviewer_for, self.trusted), validate=validate)
        return answer, [q for r in reviewers for q in r.missing]

    async def answer(self, body: object, settings: MutationSettings, *, validate: bool = False) -> dict[str, Any]:
        """The AdmissionReview response (raises ReviewError for a bad body, NotReady before sync);
        ``validate``: the validating pass (see :func:`~gpufleet.kube.webhook.review.review`)."""
        if not self.ready:
            try:
                await asyncio.wait_for(self.state.synced.wait(), self.sync_timeout)
            except TimeoutError:
                raise NotReady("the webhook has not read the cluster's Projects yet") from None
        wanted = wanted_pod_group(body)
        if wanted is not None and not self.state.has_pod_group(*wanted):
            try:
                found = await self.api.get(Kind.POD_GROUP, *wanted)
            except ApiError as err:
                log.warning("cannot read PodGroup %s/%s: %s", *wanted, err)
                found = None
            if found is not None:
                self.state.add_pod_group(found)
        answer, missing = self._decide(body, settings, validate)
        if not missing:
            return answer
        try:
            await asyncio.gather(*(self.access.ask(q) for q in dict.fromkeys(missing)))
        except ApiError as err:
            question = missing[0]
            log.warning("access review failed: %s", err)
            return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": {
                "uid": answer["response"]["uid"], "allowed": False,
                "status": {"status": "Failure", "code": 500, "reason": "InternalError",
                           "message": f"cannot ask the API server whether user {question.user} may use queue "
                                      f"{question.queue}: {err}"}}}
        answer, _ = self._decide(body, settings, validate)
        return answer
