"""SSRF-safe HTTP GET for untrusted URLs (model- or page-controlled).

``fetch(url, policy) -> FetchedPage``. Rules (brief for the web service):

- only ``http``/``https`` URLs without user info;
- every TCP connection goes through the SSRF guard (``conduit.runtime.ssrf``, rule T11): the host is
  resolved once, *every* address is checked against ``AddressPolicy`` and the socket connects to a
  checked address; refused: loopback, private, link-local, multicast, reserved, unspecified, any other
  non-global address, and cloud metadata addresses;
- redirects are followed by hand, at most ``MAX_REDIRECTS`` (5) hops, each hop checked again;
- the body is streamed and the fetch stops past ``MAX_BYTES`` (2 MB, decoded size; gzip and
  deflate are inflated here with a bounded output, so a compression bomb cannot blow up);
- only ``text/*`` and XHTML content types;
- a whole fetch (all hops) has one deadline ``timeout_s`` (seconds); env proxies are ignored.

Errors are ``ToolFailure``: kind ``forbidden`` (scheme, blocked address),
``business`` (HTTP 4xx, unsupported content, too large, too many redirects),
``transient`` (DNS, connect, timeout, HTTP 5xx/429).
"""

from __future__ import annotations

import asyncio
import re
import zlib
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from conduit.runtime.ssrf import METADATA_ADDRESSES, AddressPolicy, BlockedAddress, guarded_transport
from conduit.runtime.toolservice import ToolFailure

__all__ = ["METADATA_ADDRESSES", "AddressPolicy", "BlockedAddress", "FetchedPage", "check_url", "fetch", "guarded_client"]

MAX_BYTES = 2_000_000
"""Largest body accepted (bytes after content decoding; brief: 2 MB)."""
MAX_REDIRECTS = 5
"""Redirect hops followed (brief: at most 5)."""
DEFAULT_TIMEOUT_S = 10.0
"""Deadline of one fetch including redirects (seconds)."""
USER_AGENT = "ConduitBot/0.1 (question answering; fetches single pages on request)"


def guarded_client(policy: AddressPolicy, timeout_s: float = DEFAULT_TIMEOUT_S) -> httpx.AsyncClient:
    """An httpx client whose every connection is checked by ``policy`` (``conduit.runtime.ssrf``, rule T11);
    no redirects, no env proxies."""
    return httpx.AsyncClient(
        transport=guarded_transport(policy), follow_redirects=False, trust_env=False,
        timeout=httpx.Timeout(timeout_s, connect=min(5.0, timeout_s)),
        headers={"User-Agent": USER_AGENT, "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.1",
                 "Accept-Encoding": "gzip, deflate"},
    )


@dataclass
class FetchedPage:
    """A fetched page: final ``url`` after redirects, HTTP ``status``, ``mime`` type, raw ``body`` bytes."""

    url: str
    status: int
    mime: str
    charset: str | None
    body: bytes

    @property
    def is_html(self) -> bool:
        """True for HTML/XHTML (and unlabelled bodies that look like HTML)."""
        if self.mime in ("text/html", "application/xhtml+xml"):
            return True
        return not self.mime and b"<html" in self.body[:2048].lower()

    def text(self) -> str:
        """The body decoded: header charset, then ``<meta charset>``, then UTF-8, then GB18030 (replacing errors)."""
        for enc in (self.charset, _meta_charset(self.body) if self.is_html else None):
            if enc:
                try:
                    return self.body.decode(enc, errors="replace")
                except LookupError:
                    pass
        try:
            return self.body.decode("utf-8")
        except UnicodeDecodeError:
            return self.body.decode("gb18030", errors="replace")


_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_\-]+)""", re.IGNORECASE)


def _meta_charset(body: bytes) -> str | None:
    match = _META_CHARSET.search(body[:4096])
    return match.group(1).decode("ascii") if match else None


def _is_text_type(mime: str) -> bool:
    return mime.startswith("text/") or mime == "application/xhtml+xml"


def check_url(url: str) -> str:
    """Validate an untrusted URL's form; return its host. Raises ``ToolFailure`` (kind forbidden / bad_arguments)."""
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise ToolFailure("bad_url", f"malformed URL: {exc}", kind="bad_arguments") from exc
    if parts.scheme.lower() not in ("http", "https"):
        scheme = parts.scheme or "none"
        raise ToolFailure("forbidden_scheme", f"only http and https URLs can be fetched, not {scheme!r}",
                          hint="give a full http(s) URL", kind="forbidden")
    if not host:
        raise ToolFailure("bad_url", "URL has no host", kind="bad_arguments")
    if parts.username or parts.password:
        raise ToolFailure("forbidden_url", "URLs with user names or passwords are not fetched", kind="forbidden")
    return host


async def _read_capped(response: httpx.Response, max_bytes: int) -> bytes:
    """Read the streamed body, decompressing gzip/deflate ourselves with a bounded output.

    httpx's own decoder inflates a whole network chunk at once (a 64 KB gzip bomb
    becomes ~64 MB); here no more than ``max_bytes + 1`` bytes are ever produced.
    Raises ``ToolFailure``: ``too_large`` past ``max_bytes``, ``unsupported_content``
    for other encodings or a corrupt stream (kind business).
    """
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity"):
        inflater = None
    elif encoding in ("gzip", "x-gzip", "deflate"):
        inflater = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib header, detected
    else:
        raise ToolFailure("unsupported_content", f"content encoding {encoding!r} is not supported", kind="business")
    buf = bytearray()
    async for piece in response.aiter_raw():
        if inflater is not None:
            try:
                piece = inflater.decompress(piece, max_bytes + 1 - len(buf))
            except zlib.error as exc:
                raise ToolFailure("unsupported_content", f"corrupt {encoding} body", kind="business") from exc
        buf.extend(piece)
        if len(buf) > max_bytes:
            raise ToolFailure("too_large", f"page is larger than {max_bytes} bytes", hint="try another source",
                              kind="business")
    return bytes(buf)


async def fetch(url: str, policy: AddressPolicy, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                max_bytes: int = MAX_BYTES, max_redirects: int = MAX_REDIRECTS) -> FetchedPage:
    """GET ``url`` under ``policy``; return the final page. Raises ``ToolFailure`` (see module doc)."""
    try:
        async with asyncio.timeout(timeout_s):
            async with guarded_client(policy, timeout_s) as client:
                return await _follow(client, url, max_bytes, max_redirects)
    except TimeoutError as exc:
        raise ToolFailure("fetch_timeout", f"page did not load within {timeout_s:g} s", kind="transient") from exc


async def _follow(client: httpx.AsyncClient, url: str, max_bytes: int, max_redirects: int) -> FetchedPage:
    current = url
    for _hop in range(max_redirects + 1):
        host = check_url(current)
        try:
            response = await client.send(client.build_request("GET", current), stream=True)
        except BlockedAddress as exc:
            raise ToolFailure("forbidden_address", f"refused to fetch {host}: {exc.ip} is {exc.reason}",
                              hint="only public web pages can be fetched", kind="forbidden") from exc
        except httpx.TimeoutException as exc:
            raise ToolFailure("fetch_timeout", f"{host} timed out", kind="transient") from exc
        except (httpx.HTTPError, OSError) as exc:
            raise ToolFailure("fetch_failed", f"cannot fetch {host}: {type(exc).__name__}: {exc}"[:300],
                              kind="transient") from exc
        try:
            if response.is_redirect:
                current = str(response.url.join(response.headers["location"]))
                continue
            return await _accept(response, max_bytes)
        finally:
            await response.aclose()
    raise ToolFailure("too_many_redirects", f"more than {max_redirects} redirects", kind="business")


async def _accept(response: httpx.Response, max_bytes: int) -> FetchedPage:
    """Check status, content type and size of a non-redirect response and read its body."""
    status = response.status_code
    if status == 429 or status >= 500:
        raise ToolFailure("http_error", f"server answered HTTP {status}", hint="try again later", kind="transient")
    if status >= 400:
        raise ToolFailure("http_error", f"server answered HTTP {status}", hint="check the URL", kind="business")
    content_type = response.headers.get("content-type", "")
    mime = content_type.split(";", 1)[0].strip().lower()
    if mime and not _is_text_type(mime):
        raise ToolFailure("unsupported_content", f"content type {mime!r} is not a text page",
                          hint="only HTML and text pages can be read", kind="business")
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise ToolFailure("too_large", f"page is {int(length)} bytes, more than {max_bytes}", kind="business")
    body = await _read_capped(response, max_bytes)
    if not mime and b"\x00" in body[:1024]:
        raise ToolFailure("unsupported_content", "unlabelled binary content", kind="business")
    return FetchedPage(url=str(response.url), status=status, mime=mime, charset=response.charset_encoding,
                       body=body)
