"""The SSRF guard for every outgoing HTTP request to an address Conduit does not choose itself
(a page the model names, a tenant's remote A2A agent, a client's push-notification URL).

Rule T11 (docs/rules.md): the host is resolved once, *every* address is checked against an
``AddressPolicy`` and the socket connects to a checked address (no second DNS lookup, so DNS
rebinding cannot swap the address); refused: loopback, private, link-local, multicast, reserved,
unspecified, any other non-global address, and cloud metadata addresses (``METADATA_ADDRESSES``,
whatever the policy). ``allow_private`` (tests and local deployments: ``web_allow_private``,
``a2a_allow_private``) lets loopback and private addresses through; link-local and metadata stay blocked.
Moved here from the web service (``services/web/safefetch.py`` keeps the page fetch) so the mcp service's
A2A client and the gateway's push notifications use the same guard.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from dataclasses import dataclass, field
from typing import Any

import certifi
import httpcore
import httpx

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
        allow_private: TESTS ONLY (``settings.web.web_allow_private``): also allow loopback and
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


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore network backend that resolves, checks every address, then connects to a checked one."""

    def __init__(self, policy: AddressPolicy) -> None:
        self.policy = policy
        self.inner = httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None, socket_options: Any = None) -> httpcore.AsyncNetworkStream:
        try:
            addresses = await checked_addresses(host, port, self.policy, timeout)
        except (OSError, TimeoutError) as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
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


def guarded_transport(policy: AddressPolicy, max_connections: int = 20) -> httpx.AsyncHTTPTransport:
    """An httpx transport whose every connection is checked by ``policy`` (``BlockedAddress`` is raised from
    the request for a refused address); env proxies are ignored, no retries.

    httpx's transport does not take a network backend, so its connection pool is replaced by one
    built on ``GuardedBackend`` (relies on ``AsyncHTTPTransport._pool``, stable across httpx 0.2x).
    """
    transport = httpx.AsyncHTTPTransport(trust_env=False, retries=0)
    transport._pool = httpcore.AsyncConnectionPool(  # noqa: SLF001 - see docstring
        ssl_context=ssl.create_default_context(cafile=certifi.where()),
        max_connections=max_connections,
        network_backend=GuardedBackend(policy),
    )
    return transport


async def checked_addresses(host: str, port: int, policy: AddressPolicy, timeout_s: float | None) -> list[IPAddress]:
    """``host``'s addresses (distinct, in resolver order) once every one passed ``policy``. Raises ``BlockedAddress``
    for the first refused one, ``OSError`` / ``TimeoutError`` (after ``timeout_s`` seconds) when it does not resolve."""
    loop = asyncio.get_running_loop()
    infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout_s)
    addresses: list[IPAddress] = []
    for info in infos:
        ip = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        reason = policy.block_reason(ip)
        if reason:
            raise BlockedAddress(host, str(ip), reason)
        if ip not in addresses:
            addresses.append(ip)
    return addresses


async def check_host(host: str, port: int, policy: AddressPolicy, timeout_s: float = 5.0) -> None:
    """Resolve ``host`` and check every address against ``policy`` (rule T11) before a URL is accepted (a push
    URL when it is set); the connection checks again. Raises ``BlockedAddress``, or ``OSError`` / ``TimeoutError``
    when the host does not resolve."""
    await checked_addresses(host, port, policy, timeout_s)
