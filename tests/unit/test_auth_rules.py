"""Pure identity rules: JWT verification (JWKS over a local HTTP server, key rotation, shared
secret), key format, the scope rules, the auth-mode guard and the CLI's duration parser."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer

import jwt
import pytest
import typer
from cryptography.hazmat.primitives.asymmetric import rsa

from ops.keyscli import parse_duration
from conduit.records import apikeys
from conduit.runtime.settings import Settings
from conduit.runtime.tenants import narrow_tools, policy
from services.gateway.identity.auth import Principal, can_see, check_auth_mode, decode_jwt, is_loopback


class Jwks:
    """A JWKS endpoint on 127.0.0.1 serving ``keys`` (swap them to rotate); counts fetches."""

    def __init__(self) -> None:
        self.keys: dict[str, rsa.RSAPrivateKey] = {}
        self.fetches = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                outer.fetches += 1
                body = json.dumps({"keys": [
                    {**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(k.public_key())), "kid": kid, "alg": "RS256",
                     "use": "sig"} for kid, k in outer.keys.items()]}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/jwks.json"
        threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True).start()  # shutdown waits one poll

    def sign(self, kid: str, **claims: object) -> str:
        base = {"sub": "alice", "tenant_id": "t1", "aud": "conduit", "iss": "https://idp.test",
                "exp": datetime.now(UTC) + timedelta(minutes=5)}
        return jwt.encode({**base, **claims}, self.keys[kid], algorithm="RS256", headers={"kid": kid})


@pytest.fixture
def jwks() -> Iterator[Jwks]:
    server = Jwks()
    server.keys["k1"] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    yield server
    server.server.shutdown()


def test_jwks_tokens_are_verified_cached_and_refetched_on_an_unknown_kid(jwks: Jwks) -> None:
    s = Settings(auth="jwt", auth_jwt_jwks_url=jwks.url, auth_jwt_issuer="https://idp.test",
                 auth_jwks_refetch_cooldown_s=0)
    assert decode_jwt(s.identity, jwks.sign("k1", roles=["admin"]))["roles"] == ["admin"]
    decode_jwt(s.identity, jwks.sign("k1"))
    assert jwks.fetches == 1  # cached
    jwks.keys["k2"] = rsa.generate_private_key(public_exponent=65537, key_size=2048)  # the issuer rotates
    assert decode_jwt(s.identity, jwks.sign("k2"))["sub"] == "alice"
    assert jwks.fetches == 2  # fetched again for the unknown kid
    for bad in (jwks.sign("k1", exp=datetime.now(UTC) - timedelta(minutes=1)), jwks.sign("k1", aud="other"),
                jwks.sign("k1", iss="https://evil.test"), jwks.sign("k1", exp=None)):
        with pytest.raises(jwt.PyJWTError):
            decode_jwt(s.identity, bad)
    forged = jwt.encode({"sub": "alice", "tenant_id": "t1", "aud": "conduit", "iss": "https://idp.test",
                         "exp": datetime.now(UTC) + timedelta(minutes=5)}, "guess-guess-guess-guess-guess-guess", algorithm="HS256",
                        headers={"kid": "k1"})
    with pytest.raises(jwt.PyJWTError):  # no HMAC tokens when a JWKS is configured
        decode_jwt(s.identity, forged)


def test_shared_secret_tokens() -> None:
    s = Settings(auth="jwt", auth_jwt_secret="s3cret-s3cret-s3cret-s3cret-s3cret")
    good = jwt.encode({"sub": "u", "tenant_id": "t", "aud": "conduit", "exp": datetime.now(UTC) + timedelta(minutes=1)},
                      s.identity.auth_jwt_secret, algorithm="HS256")
    assert decode_jwt(s.identity, good)["sub"] == "u"
    with pytest.raises(jwt.PyJWTError):
        decode_jwt(s.identity, jwt.encode({"sub": "u", "aud": "conduit", "exp": datetime.now(UTC) + timedelta(minutes=1)},
                                 "another-secret-another-secret-xx", algorithm="HS256"))


def test_key_format_and_scope_rules() -> None:
    key_id, key = apikeys.new_key()
    assert apikeys.key_id_of(key) == key_id and len(key) > 50
    for bad in ("", "cdk_", "cdk_short_x", f"cdk_{key_id}_", "Bearer x", f"xyz_{key_id}_abc", "cdk_ZZZZZZZZZZZZ_abc"):
        assert apikeys.key_id_of(bad) is None, bad
    alice = Principal("t1", "alice", "member", "key", "k")
    admin = Principal("t1", "boss", "admin", "key", "k2")
    assert can_see(alice, "t1", "alice") and not can_see(alice, "t1", "bob") and not can_see(alice, "t2", "alice")
    assert can_see(admin, "t1", "bob") and not can_see(admin, "t2", "bob")


def test_auth_none_only_on_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.5") and not is_loopback("gateway")
    check_auth_mode(Settings(auth="none", gateway_host="127.0.0.1"))
    with pytest.raises(RuntimeError, match="loopback"):
        check_auth_mode(Settings(auth="none", gateway_host="0.0.0.0"))
    with pytest.raises(RuntimeError, match="JWT"):
        check_auth_mode(Settings(auth="jwt"))


def test_durations() -> None:
    assert parse_duration("30d") == timedelta(days=30) and parse_duration("90m") == timedelta(minutes=90)
    for bad in ("0d", "soon", "5w", "-1d"):
        with pytest.raises(typer.BadParameter):
            parse_duration(bad)


def test_tenant_policy_overrides_and_tool_narrowing() -> None:
    s = Settings(tenants={"acme": {"allowed_tools": ["kb_search", "web_search"], "model": "m-acme", "running_tasks": 3}},
                 model="m-default", running_tasks_per_tenant=50)
    acme, other = policy(s, "acme"), policy(s, "other")
    assert (acme.model, acme.running_tasks, acme.rate_limit_per_minute) == ("m-acme", 3, s.limits.rate_limit_tenant_per_minute)
    assert (other.model, other.running_tasks, other.allowed_tools) == ("m-default", 50, None)
    assert narrow_tools(None, acme.allowed_tools) == ["kb_search", "web_search"]
    assert narrow_tools(["code_exec", "kb_search"], acme.allowed_tools) == ["kb_search"]
    assert narrow_tools(["code_exec"], None) == ["code_exec"] and narrow_tools(None, None) is None
