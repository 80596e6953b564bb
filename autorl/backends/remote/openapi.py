"""The OpenAPI description of `autorl serve`'s HTTP surface, request bodies included.

The routes read their bodies themselves (gzip, size limits), so FastAPI does not see the request models;
`request_body(kind)` names a route's model for the description (`openapi_extra`), and `describe(app)` builds the
document with the models' definitions under `components/schemas`. The server does not serve the document
(no /openapi.json, no /docs): it is what the tests fuzz the surface from (tests/test_serve_fuzz.py), and a
reference for whoever writes a client in another language.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

REF_TEMPLATE = "#/components/schemas/{model}"


def request_body(kind: type[BaseModel]) -> dict[str, Any]:
    """A route's `openapi_extra`: its JSON body is a `kind`."""
    schema = kind.model_json_schema(ref_template=REF_TEMPLATE)
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def describe(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI document of `app`, the request models' definitions moved to `components/schemas`."""
    document = get_openapi(title=app.title, version="1", routes=app.routes)
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for operations in document["paths"].values():
        for operation in operations.values():
            content = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
            schemas.update(content.get("schema", {}).pop("$defs", {}))
    return document
