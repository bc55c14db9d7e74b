"""Who may see what: the :class:`Visibility` of one request and the :class:`Authorizer` that decides it.

Every view model filters by a :class:`Visibility`. The dashboard never decides access itself: an
:class:`Authorizer` (``gpufleet.web.auth`` checks the API server's TokenReview and SubjectAccessReview)
says which projects and queues the caller may ``get``, or raises an HTTP 401/403; without one
(``--auth none``) everything is visible and the caller is an admin.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from starlette.requests import Request

__all__ = ["EVERYTHING", "Authorizer", "Visibility"]


@dataclass(frozen=True, slots=True)
class Visibility:
    """What one caller may see: ``all`` (every project and queue), else the ``projects`` and ``queues``
    named; ``admin``: the ``gpufleet-platform-admin`` role (the what-if page)."""

    all: bool = False
    projects: frozenset[str] = frozenset()
    queues: frozenset[str] = frozenset()
    admin: bool = False

    def sees_queue(self, queue: str | None, project: str | None = None) -> bool:
        """A queue is visible when it is named, or when its project is (``project``: a Project listing it)."""
        return self.all or (queue is not None and queue in self.queues) or (
            project is not None and project in self.projects)

    def sees(self, project: str | None, queue: str | None) -> bool:
        """A pod (or a ledger row) is visible when its project or its queue is."""
        return self.all or (project is not None and project in self.projects) or (
            queue is not None and queue in self.queues)


EVERYTHING = Visibility(all=True, admin=True)


class Authorizer(Protocol):
    """Decides a request's :class:`Visibility`; raises ``starlette.exceptions.HTTPException`` 401
    (no or a bad credential) or 403 (a credential that may see nothing)."""

    async def visible(self, request: Request) -> Visibility: ...
