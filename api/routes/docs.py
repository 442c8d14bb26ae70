"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), served with their assets from this app.

FastAPI's own pages load Swagger UI, ReDoc and a favicon from CDNs: offline (an air-gapped GPU
box, a laptop on a plane) ``/docs`` is a blank page. These routes render the same pages
(`fastapi.openapi.docs`) pointing at files served here, under ``/docs/static/``. The files come
from the ``fastapi-offline`` wheel (Swagger UI 5, which renders OpenAPI 3.1, and ReDoc 2); only
its static folder is used, read from the installed package, nothing fetched at run time.
"""

from __future__ import annotations

from functools import cache
from importlib.util import find_spec
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Request
from fastapi import Path as PathParam
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, HTMLResponse
from starlette.exceptions import HTTPException

__all__ = ["ASSETS", "DOCS_STATIC", "assets_dir", "router"]

router = APIRouter(include_in_schema=False)

#: Where the assets are served.
DOCS_STATIC = "/docs/static"
#: The files served, by name, with their media types (nothing else of the package is reachable).
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}
#: The assets change only with the installed package: browsers may keep them a day.
_ASSET_HEADERS = {"Cache-Control": "public, max-age=86400"}
OAUTH2_REDIRECT = "/docs/oauth2-redirect"
#: Images from here only: ReDoc's sidebar shows its maker's logo from a CDN, which offline is a
#: failed request and online a call to a third party; the pages' own icons are inline data.
_PAGE_CSP = "img-src 'self' data:"


def _offline(response: HTMLResponse) -> HTMLResponse:
    response.headers["Content-Security-Policy"] = _PAGE_CSP
    return response


@cache
def assets_dir() -> Path:
    """The installed ``fastapi_offline/static`` folder (found without importing the package)."""
    spec = find_spec("fastapi_offline")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the fastapi-offline package (Swagger UI and ReDoc files) is not installed: "
                           "pip install 'kernelloop[service]'")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


def _root(request: Request) -> str:
    return str(request.scope.get("root_path") or "")


@router.get("/docs")
def swagger_ui(request: Request) -> HTMLResponse:
    """The API's interactive documentation (Swagger UI)."""
    root = _root(request)
    return _offline(get_swagger_ui_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} · API",
        swagger_js_url=f"{root}{DOCS_STATIC}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{DOCS_STATIC}/swagger-ui.css",
        swagger_favicon_url=f"{root}{DOCS_STATIC}/favicon.png",
        oauth2_redirect_url=f"{root}{OAUTH2_REDIRECT}",
    ))


@router.get(OAUTH2_REDIRECT)
def swagger_ui_redirect() -> HTMLResponse:
    """Swagger UI's OAuth2 helper page (unused by API keys, kept so the UI never points nowhere)."""
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
def redoc(request: Request) -> HTMLResponse:
    """The API's reference documentation (ReDoc)."""
    root = _root(request)
    return _offline(get_redoc_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} · API reference",
        redoc_js_url=f"{root}{DOCS_STATIC}/redoc.standalone.js",
        redoc_favicon_url=f"{root}{DOCS_STATIC}/favicon.png",
        with_google_fonts=False,
    ))


@router.get(DOCS_STATIC + "/{name}")
def docs_asset(name: Annotated[str, PathParam(max_length=64)]) -> FileResponse:
    """One of the documentation pages' assets."""
    media_type = ASSETS.get(name)
    if media_type is None:
        raise HTTPException(404, f"no documentation asset {name!r}")
    return FileResponse(assets_dir() / name, media_type=media_type, headers=_ASSET_HEADERS)
