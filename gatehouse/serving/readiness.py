"""
`GET /ready`: whether this server process can serve now, for load balancers and orchestrators; `GET /status` stays
the liveness check (the process answers).

Ready means: every pipeline of the manifest is deployed, and, with PostgreSQL, every database the process's stores use
answers (the primary a query; a read URL when it can be reached and is not lagging behind the primary by more than
its `max_lag_s`: `postgres_document_store.readiness`). The answer is 200 `{"status": "ready"}`, else 503
`{"status": "not ready", "reasons": [...]}` with `Retry-After`; the reasons name no database user, host, port or name.
Like `/status` it needs no key and is not rate-limited. Each process of `--processes N` answers for itself; the
kernel hands a probe's connection to one of them.

Usage:
```python
from gatehouse.serving.readiness import readiness_router

app.include_router(readiness_router(manifest))
```
"""

import math
import sys

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from gatehouse.serving.manifest import Manifest

DEPLOYING_RETRY_S = 5
STORE_MODULE = "gatehouse.document_stores.postgres_document_store"
READY = {"type": "object", "properties": {"status": {"enum": ["ready", "not ready"]},
                                          "reasons": {"type": "array", "items": {"type": "string"}}}}


def readiness_router(manifest: Manifest) -> APIRouter:
    """`GET` and `HEAD /ready` for the pipelines of `manifest`."""
    router = APIRouter(tags=["status"])

    @router.api_route("/ready", methods=["GET", "HEAD"], response_model=None, responses={
        200: {"description": "Ready: every pipeline deployed, every database answering (a standby within its lag)",
              "content": {"application/json": {"schema": READY}}},
        503: {"description": "Not ready; `reasons` says why, `Retry-After` when to ask again",
              "content": {"application/json": {"schema": READY}},
              "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds"}}}})
    def ready(request: Request) -> JSONResponse:
        """Whether this process can serve now (`/status` only says that it runs)."""
        problems: list[tuple[str, float]] = []
        deployed = set(request.app.state.pipeline_registry.get_names())
        missing = sorted(set(manifest.pipelines) - deployed)
        if missing:
            problems.append((f"pipelines not deployed: {', '.join(missing)}", DEPLOYING_RETRY_S))
        store = sys.modules.get(STORE_MODULE)  # loaded only when a pipeline uses PostgreSQL
        if store is not None:
            problems.extend(store.readiness())
        if not problems:
            return JSONResponse({"status": "ready"})
        retry_after = max(1, math.ceil(max(seconds for _, seconds in problems)))
        return JSONResponse({"status": "not ready", "reasons": [reason for reason, _ in problems]}, status_code=503,
                            headers={"Retry-After": str(retry_after)})

    return router
