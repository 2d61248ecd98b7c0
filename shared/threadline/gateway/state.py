"""One gateway process's state and who may do what: :class:`Gateway` (the client, the database
pool, the auth settings; the caller, its resource, the thread it names) and :class:`ApiError`,
the HTTP error answer every route raises. A thread that is missing and a thread of another
resource get the same 404 body (decision 51)."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.requests import Request

from threadline.client.client import ThreadlineClient
from threadline.gateway.auth import AuthConfig, Caller, authenticate, credential, refusal
from threadline.store import queries
from threadline.store.db import Database

NOT_FOUND = {"error": {"code": "not_found", "message": "no such thread for this resource"}}
"""The one body of a missing thread and of another resource's thread."""
HIDDEN_CODES = frozenset({"thread_owned_by_other_resource"})
"""Ingress error codes that would tell that another resource's thread exists: answered as 404."""


class ApiError(Exception):
    """An HTTP error answer: ``status`` and the JSON body."""

    def __init__(self, status: int, code: str, message: str, body: Mapping[str, object] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body or {"error": {"code": code, "message": message}}


class Gateway:
    """State of one gateway process: the client, the database pool, the auth settings."""

    def __init__(self, client: ThreadlineClient, db: Database, auth: AuthConfig, *,
                 chat_send_reasoning: bool = False) -> None:
        self.client = client
        self.db = db
        self.auth = auth
        self.chat_send_reasoning = chat_send_reasoning
        """The AI SDK chat route sends reasoning parts (``chatRoute``'s ``sendReasoning``)."""

    # --- who, which resource, which thread -------------------------------------------------------
    def caller(self, request: Request, *, query_token: bool = False) -> Caller:
        secret = credential(request.headers, request.query_params if query_token else None)
        caller = authenticate(self.auth, secret)
        if caller is None:
            raise ApiError(401, "unauthenticated", refusal(self.auth, secret))
        return caller

    def resource(self, request: Request, *, query_token: bool = False) -> str:
        """The path's resource id, which the caller must be allowed to act for (else 403)."""
        caller = self.caller(request, query_token=query_token)
        resource_id = request.path_params["resource_id"]
        if not caller.may_act_for(resource_id):
            raise ApiError(403, "forbidden", "this caller may not act for this resource")
        return resource_id

    async def owner(self, thread_id: str) -> str | None:
        return await queries.thread_owner(self.db, thread_id)

    async def existing_thread(self, request: Request, *, query_token: bool = False) -> tuple[str, str]:
        """``(resource_id, thread_id)`` of a thread that exists and belongs to the resource; 404 else."""
        resource_id = self.resource(request, query_token=query_token)
        thread_id = request.path_params["thread_id"]
        if await self.owner(thread_id) != resource_id:
            raise ApiError(404, "not_found", "", NOT_FOUND)
        return resource_id, thread_id

    def refuse_when_full(self) -> None:
        """Raise :class:`StreamsFullError` (503 ``at_capacity``) when the gateway serves its
        maximum of streams: before any I/O, so a crowd of viewers is refused in microseconds and
        holds no descriptor or database connection while it waits (decision 223)."""
        refuse = getattr(self.client.transport, "refuse_when_full", None)  # a Kafka transport's
        if refuse is not None:
            refuse()

    async def writable_thread(self, request: Request) -> tuple[str, str]:
        """``(resource_id, thread_id)`` of a thread that is the resource's or does not exist yet
        (a send creates it); another resource's thread is 404 (the body of a missing one)."""
        resource_id = self.resource(request)
        thread_id = request.path_params["thread_id"]
        if await self.owner(thread_id) not in (None, resource_id):
            raise ApiError(404, "not_found", "", NOT_FOUND)
        return resource_id, thread_id
