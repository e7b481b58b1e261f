"""
REST endpoints for the knowledge bases held by the stores of the deployed index pipeline.

- `GET /kbs` lists them with their document and chunk counts (`?tenant=` for one tenant; default every tenant the
  key may manage).
- `DELETE /kbs/{kb}` deletes one tenant's knowledge base from both stores (`?tenant=`, default the key's first tenant).

An admin key may act on any tenant, another key only on its own tenants (403 otherwise); without keys (a loopback
server) every tenant. `gatehouse serve` adds these routes when the manifest deploys an index pipeline.

Usage:
```python
from gatehouse.serving.knowledge_bases import knowledge_base_routes

app.include_router(knowledge_base_routes(keyring=keyring, index_pipeline="index"))
```
"""

from dataclasses import asdict

from fastapi import APIRouter, HTTPException, Request
from typing_extensions import TypedDict

from gatehouse.knowledge_bases import KnowledgeBaseCatalogue, KnowledgeBaseNotFoundError
from gatehouse.serving.auth import AccessDenied, KeyRing, denied, resolve_principal
from gatehouse.serving.data_dir_answers import data_dir_unavailable, require_writable_data_dir
from gatehouse.serving.wrappers import Name, check_name

NOT_MANAGED = {403: {"description": "The API key may not manage the tenant"}}
UNAVAILABLE = {503: {"description": "The index pipeline is not deployed, or the data directory cannot be used "
                                    "(read-only, full)"}}


class KnowledgeBaseInfo(TypedDict):
    """A knowledge base of one tenant with its counts."""

    tenant: str
    kb: str
    documents: int
    chunks: int


class KnowledgeBaseList(TypedDict):
    """The knowledge bases a caller may manage."""

    knowledge_bases: list[KnowledgeBaseInfo]


class DeletedKnowledgeBase(TypedDict):
    """The deleted knowledge base, with the counts it had."""

    deleted: KnowledgeBaseInfo


def knowledge_base_routes(*, keyring: KeyRing, index_pipeline: str) -> APIRouter:
    """
    The `/kbs` routes over the stores of a deployed index pipeline.

    :param keyring: The server's keys (the guard has already refused requests without a valid one).
    :param index_pipeline: The Hayhooks name of the deployed index pipeline, whose writer's stores are managed.
    :returns: A router to include in the app.
    """
    router = APIRouter(prefix="/kbs", tags=["knowledge bases"])

    def catalogue() -> KnowledgeBaseCatalogue:
        from hayhooks.server.pipelines.registry import registry

        wrapper = registry.get(index_pipeline)
        if wrapper is None:
            raise HTTPException(status_code=503, detail=f"the index pipeline {index_pipeline!r} is not deployed")
        return KnowledgeBaseCatalogue.from_index_pipeline(wrapper.pipeline)

    @router.get("", responses={**NOT_MANAGED, **UNAVAILABLE})
    def list_knowledge_bases(request: Request, tenant: Name | None = None) -> KnowledgeBaseList:
        """
        List the knowledge bases with their document and chunk counts.

        :param tenant: Only this tenant's (one the API key may manage); default every tenant the key may manage.
        :returns: The knowledge bases, by tenant and name.
        """
        check_name(tenant, field="tenant", kind="tenant")
        principal = resolve_principal(keyring, request.headers)
        try:
            tenants = ([keyring.managed_tenant(principal, tenant)] if tenant is not None
                       else keyring.managed_tenants(principal))
        except AccessDenied as error:
            raise denied(error) from error
        with data_dir_unavailable():
            held = catalogue().knowledge_bases(tenants=tenants)
        return {"knowledge_bases": [KnowledgeBaseInfo(**asdict(kb)) for kb in held]}

    @router.delete("/{kb}", responses={
        **NOT_MANAGED, 404: {"description": "The tenant holds no such knowledge base"}, **UNAVAILABLE})
    def delete_knowledge_base(request: Request, kb: Name, tenant: Name | None = None) -> DeletedKnowledgeBase:
        """
        Delete a knowledge base of one tenant from the dense and the lexical store; other tenants' stay.

        :param kb: The knowledge base.
        :param tenant: Its tenant (one the API key may manage); default the key's first tenant.
        :returns: The deleted knowledge base with the counts it had; 404 when the tenant holds no such knowledge base,
            503 when the data directory cannot be written.
        """
        check_name(kb, field="kb", kind="knowledge base")
        check_name(tenant, field="tenant", kind="tenant")
        try:
            tenant_name = keyring.managed_tenant(resolve_principal(keyring, request.headers), tenant)
        except AccessDenied as error:
            raise denied(error) from error
        require_writable_data_dir()
        try:
            with data_dir_unavailable():
                deleted = catalogue().delete(kb=kb, tenant=tenant_name)
        except KnowledgeBaseNotFoundError as error:
            raise HTTPException(status_code=404, detail=str(error)) from error
        return {"deleted": KnowledgeBaseInfo(**asdict(deleted))}

    return router
