"""SSRF-safe HTTP GET for untrusted URLs (model- or page-controlled).

``fetch(url, policy) -> FetchedPage``. Rules (brief for the web service):

- only ``http``/``https`` URLs without user info;
- every TCP connection goes through ``_GuardedBackend``: the host is resolved once,
  *every* address is checked against ``AddressPolicy`` and the socket connects to a
  checked address (no second DNS lookup, so DNS rebinding cannot swap the address);
  refused: loopback, private, link-local, multicast, reserved, unspecified, any other
  non-global address, and cloud metadata addresses (``METADATA_ADDRESSES``);
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
import ipaddress
import re
import socket
import ssl
import zlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import certifi
import httpcore
import httpx

from conduit.runtime.toolservice import ToolFailure

MAX_BYTES = 2_000_000
"""Largest body accepted (bytes after content decoding; brief: 2 MB)."""
MAX_REDIRECTS = 5
"""Redirect hops followed (brief: at most 5)."""
DEFAULT_TIMEOUT_S = 10.0
"""Deadline of one fetch including redirects (seconds)."""
USER_AGENT = "ConduitBot/0.1 (question answering; fetches single pages on request)"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",  # AWS, GCP, Azure, OpenStack instance metadata
    "fd00:ec2::254",    # AWS IMDS over IPv6
    "169.254.170.2",    # AWS ECS task metadata
    "100.100.100.200",  # Alibaba Cloud metadata
    "168.63.129.16",    # Azure wire server (a public address)
))
"""Never fetched, whatever the policy."""

_NAT64 = ipaddress.ip_network("64:ff9b::/96")


@dataclass(frozen=True)
class AddressPolicy:
    """Which resolved addresses a fetch may connect to.

    Args:
        allow_private: TESTS ONLY (``settings.web_allow_private``): also allow loopback and
            private (RFC 1918, ULA) addresses. Link-local and metadata stay blocked.
        allow_addresses: exact addresses allowed despite the rules (e.g. one trusted
            intranet host); metadata addresses can never be allowed.
    """

    allow_private: bool = False
    allow_addresses: frozenset[str] = field(default_factory=frozenset)

    def block_reason(self, ip: IPAddress) -> str | None:
        """Why ``ip`` must not be contacted, or ``None`` when it may."""
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            reason = self.block_reason(embedded)
            return f"{reason} (embedded in {ip})" if reason else None
        if ip in METADATA_ADDRESSES:
            return "a cloud metadata address"
        if ip.is_link_local:
            return "a link-local address"
        if str(ip) in self.allow_addresses:
            return None
        if ip.is_unspecified:
            return "an unspecified address"
        if ip.is_multicast:
            return "a multicast address"
        if ip.is_loopback:
            return None if self.allow_private else "a loopback address"
        if ip.is_private:
            return None if self.allow_private else "a private address"
        if ip.is_reserved:
            return "a reserved address"
        if not ip.is_global:
            return "a non-public address"
        return None


def _embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address carried inside an IPv6 one (mapped, 6to4, Teredo, NAT64), if any."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


class BlockedAddress(Exception):
    """Raised inside the connection layer when a host resolves to a refused address."""

    def __init__(self, host: str, ip: str, reason: str) -> None:
        super().__init__(f"{host} resolves to {ip}, {reason}")
        self.host, self.ip, self.reason = host, ip, reason


class _GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore network backend that resolves, checks every address, then connects to a checked one."""

    def __init__(self, policy: AddressPolicy) -> None:
        self.policy = policy
        self.inner = httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None, socket_options: Any = None) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout)
        except (OSError, TimeoutError) as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        addresses: list[IPAddress] = []
        for info in infos:
            ip = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
            reason = self.policy.block_reason(ip)
            if reason:
                raise BlockedAddress(host, str(ip), reason)
            if ip not in addresses:
                addresses.append(ip)
        if not addresses:
            raise httpcore.ConnectError(f"{host} has no address")
        last: Exception | None = None
        for ip in addresses:
            try:
                return await self.inner.connect_tcp(str(ip), port, timeout=timeout, local_address=local_address,
                                                    socket_options=socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Any = None) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not allowed")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def guarded_client(policy: AddressPolicy, timeout_s: float = DEFAULT_TIMEOUT_S) -> httpx.AsyncClient:
    """An httpx client whose every connection is checked by ``policy``; no redirects, no env proxies.

    httpx's transport does not take a network backend, so its connection pool is
    replaced by one built on ``_GuardedBackend`` (relies on ``AsyncHTTPTransport._pool``,
    stable across httpx 0.2x).
    """
    transport = httpx.AsyncHTTPTransport(trust_env=False, retries=0)
    transport._pool = httpcore.AsyncConnectionPool(  # noqa: SLF001 - see docstring
        ssl_context=ssl.create_default_context(cafile=certifi.where()),
        max_connections=20,
        network_backend=_GuardedBackend(policy),
    )
    return httpx.AsyncClient(
        transport=transport, follow_redirects=False, trust_env=False,
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
