"""The web page people use, served by the gateway from files inside the package.

- ``GET /``              -> ``static/index.html`` (the chat page; no build step, no CDN)
- ``GET /static/<path>`` -> the page's modules, styles and vendored libraries
  (``static/vendor/``: marked and DOMPurify, versions in ``static/vendor/VENDOR.md``)

Both are public: the page itself holds no data; every API call it makes sends
``Authorization: Bearer <key>``. The page is sent with a Content-Security-Policy
that allows only this origin's scripts and styles (rule: works offline, nothing
from the network), and ``no-cache`` so a new release is picked up on reload.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).parent / "static"
CSP = ("default-src 'self'; img-src 'self' data: blob:; style-src 'self'; script-src 'self'; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")

router = APIRouter(include_in_schema=False)


@router.get("/")
async def index() -> FileResponse:
    """The chat page (HTML)."""
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html",
                        headers={"Content-Security-Policy": CSP, "Cache-Control": "no-cache",
                                 "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"})


def install_page(app: FastAPI) -> None:
    """Add ``GET /`` and the ``/static`` mount to ``app``."""
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
