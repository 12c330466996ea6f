"""``/docs``: the API's browsable reference, Swagger UI over ``/openapi.json``.

Swagger UI's script and style come from the ``swagger-ui-bundle`` package (Apache-2.0) and
are served by this process under ``/docs/static/``: the page loads nothing from another
host, so it works where the service cannot reach the internet. The page and the document are
open (the API's shape is no secret); trying an operation still needs its key, entered with
the page's Authorize button.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

DOCS_PATH = "/docs"
ASSETS_PATH = "/docs/static"


def swagger_assets() -> Path:
    """The folder of Swagger UI's files in the installed ``swagger-ui-bundle``."""
    import swagger_ui_bundle

    return Path(str(swagger_ui_bundle.swagger_ui_path))


def install(api: FastAPI) -> None:
    """Serve ``/docs`` and its assets on ``api`` (outside the OpenAPI document)."""
    assert api.openapi_url is not None
    page = get_swagger_ui_html(
        openapi_url=api.openapi_url,
        title=f"{api.title} {api.version} · API reference",
        swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS_PATH}/favicon-32x32.png",
        swagger_ui_parameters={"persistAuthorization": False},
    )

    async def docs() -> HTMLResponse:
        return HTMLResponse(bytes(page.body), headers={"cache-control": "no-store"})

    api.add_api_route(DOCS_PATH, docs, include_in_schema=False, response_class=HTMLResponse)
    api.mount(ASSETS_PATH, StaticFiles(directory=swagger_assets()), name="swagger-ui")
