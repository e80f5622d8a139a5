"""Web service: SSRF-safe fetch, extraction, the search pipeline (rules W1-W4) and one bus round trip.

A real threading HTTP server on 127.0.0.2 serves HTML pages, a SearXNG-compatible
``/search?format=json`` stub and a Tavily-compatible stub. 127.0.0.2 (not 127.0.0.1)
lets the redirect test allow exactly the server's address while 127.0.0.1 stays
forbidden. The round trip runs the web ToolService in-process against the session's
real tansu broker and Redis (a subprocess would spend 10-20 s importing scikit-learn
and trafilatura on a busy 2-core machine).
"""

from __future__ import annotations

import gzip
import json
import threading
import time
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from conduit.runtime import bus
from testkit.bus import await_tool_result
from conduit.runtime.settings import Settings, WebSettings
from conduit.runtime.toolservice import ToolFailure
from contracts import topics
from contracts.events import ToolRequested, ToolRequestPayload
from services.web import extract, pipeline, safefetch
from services.web.main import build_service
from services.web.providers import SearxngProvider, TavilyProvider, configured_provider, web_tools_available

HOST = "127.0.0.2"

TAX_HTML = """<html><head><title>小规模纳税人增值税起征点</title></head><body>
<nav>首页 | 新闻 | 联系我们</nav>
<article><h1>小规模纳税人增值税起征点</h1>
<p>{p1}</p><p>{p2}</p><p>{p3}</p></article><footer>版权所有</footer></body></html>""".format(
    p1="根据增值税法，小规模纳税人发生应税交易，销售额未达到起征点的，免征增值税；"
       "达到起征点的，依照本法规定全额计算缴纳增值税。" * 4,
    p2="起征点的幅度由国务院规定，报全国人民代表大会常务委员会备案。"
       "省、自治区、直辖市人民政府可以在规定幅度内确定本地区适用的起征点。" * 4,
    p3="The VAT threshold for small-scale taxpayers: sales below the threshold are exempt from value added tax. " * 6,
)
COOKING_HTML = """<html><head><title>Noodle recipes</title></head><body><article><h1>How to cook noodles</h1>
<p>{p}</p></article></body></html>""".format(
    p="Boil water, add salt, cook the noodles for eight minutes, drain and toss with sesame oil and scallions. " * 12)
PLAIN_TEXT = "Plain text page. The VAT threshold applies to small-scale taxpayers only. " * 20


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes = b"", ctype: str = "text/html; charset=utf-8",
              headers: dict[str, str] | None = None, length: bool = True) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 - Tavily stub
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.hits[f"POST {self.path}"] += 1
        if self.headers.get("Authorization") != "Bearer tvly-test":
            return self._send(401, b"{}", "application/json")
        results = [{"url": f"{self.server.base}/page/tax", "title": "Tax", "content": "tax snippet", "score": 0.9}]
        self._send(200, json.dumps({"query": body["query"], "results": results[: body["max_results"]]}).encode(),
                   "application/json")

    def do_GET(self) -> None:  # noqa: N802
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        path = parts.path
        self.server.hits[path] += 1
        base = self.server.base
        if path.startswith("/sx/") and path.endswith("/search"):
            scenario = path.split("/")[2]
            assert query.get("format") == ["json"]
            results = {
                "good": [(f"{base}/page/tax", "增值税起征点"), (f"{base}/page/cooking", "Noodles"),
                         (f"{base}/page/tax/#top", "dup"), (f"{base}/page/plain", "Plain")],
                "budget": [(f"{base}/hang", "Slow"), (f"{base}/page/tax", "Tax"), (f"{base}/page/cooking", "Noodles")],
                "dead": [(f"{base}/status/500", "Broken"), (f"{base}/bin", "Binary"),
                         (f"{base}/redirect?to=http://169.254.169.254/latest/meta-data/", "Metadata")],
                "empty": [],
            }[scenario]
            payload = {"query": query["q"][0], "results": [
                {"url": u, "title": t, "content": f"snippet of {t}: 起征点 small-scale VAT"} for u, t in results]}
            return self._send(200, json.dumps(payload).encode(), "application/json")
        if path in ("/page/tax", "/page/tax/"):
            return self._send(200, TAX_HTML.encode())
        if path == "/page/cooking":
            return self._send(200, COOKING_HTML.encode())
        if path == "/page/plain":
            return self._send(200, PLAIN_TEXT.encode(), "text/plain; charset=utf-8")
        if path == "/hang":
            self.server.release.wait(10)
            return self._send(200, TAX_HTML.encode())
        if path == "/big":  # 3 MB with no Content-Length: the streaming cap must stop it
            self._send(200, b"", length=False)
            chunk = b"<p>" + b"x" * 65_530 + b"</p>"
            for _ in range(48):
                try:
                    self.wfile.write(chunk)
                except OSError:
                    return
            return None
        if path == "/big-declared":
            return self._send(200, b"<p>" + b"y" * 3_000_000 + b"</p>")
        if path == "/gzip-bomb":  # 10 MB of zeros in ~10 KB of gzip
            return self._send(200, gzip.compress(b"\0" * 10_000_000), headers={"Content-Encoding": "gzip"})
        if path == "/gzip-ok":
            return self._send(200, gzip.compress(TAX_HTML.encode()), headers={"Content-Encoding": "gzip"})
        if path == "/bin":
            return self._send(200, bytes(range(256)) * 10, "application/octet-stream")
        if path == "/redirect":
            return self._send(302, b"", headers={"Location": query["to"][0]})
        if path == "/loop":
            n = int(query.get("n", ["0"])[0])
            return self._send(302, b"", headers={"Location": f"/loop?n={n + 1}"})
        if path.startswith("/status/"):
            return self._send(int(path.rsplit("/", 1)[1]), b"error")
        return self._send(404, b"not found")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    base: str
    hits: Counter
    release: threading.Event


@pytest.fixture(scope="module")
def site():
    server = _Server((HOST, 0), _Handler)
    server.base = f"http://{HOST}:{server.server_address[1]}"
    server.hits = Counter()
    server.release = threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


OPEN = safefetch.AddressPolicy(allow_private=True)


async def _failure(coro) -> ToolFailure:
    with pytest.raises(ToolFailure) as info:
        await coro
    return info.value


# ---------------------------------------------------------------- extraction units
def test_chunk_sizes_and_overlap() -> None:
    text = "".join(f"第{i}句话讲的是增值税。" for i in range(300))
    chunks = extract.chunk(text, size=600, overlap=100)
    assert len(chunks) > 5 and all(len(c) <= 600 for c in chunks)
    assert chunks[1][:20] in chunks[0]  # consecutive chunks overlap
    assert extract.chunk("short") == ["short"] and extract.chunk("") == []
    with pytest.raises(ValueError):
        extract.chunk(text, size=100, overlap=100)


def test_rerank_works_for_chinese_and_english() -> None:
    chunks = ["今天天气晴朗，适合出游。", "小规模纳税人销售额未达到起征点的，免征增值税。",
              "Noodles need boiling water."]
    assert extract.rerank("增值税起征点", chunks, top=2)[0][0] == 1
    assert extract.rerank("boiling noodles", chunks, top=1)[0][0] == 2
    assert extract.rerank("", chunks, top=2) == [(0, 0.0), (1, 0.0)]


def test_extract_drops_boilerplate_and_scripts() -> None:
    page = extract.extract_html(TAX_HTML.replace("<footer>", "<script>alert('x')</script><footer>"), "http://a.test/")
    assert "起征点" in page.text and "alert" not in page.text
    assert "起征点" in page.title
    assert extract.strip_tags("<title>T</title><p>a<script>x()</script>b</p>").text == "ab"


# ---------------------------------------------------------------- safefetch
async def test_redirect_to_loopback_refused_without_allow_private(site) -> None:
    only_server = safefetch.AddressPolicy(allow_private=False, allow_addresses=frozenset({HOST}))
    page = await safefetch.fetch(f"{site.base}/page/tax", only_server)  # the server itself is allowed...
    assert page.status == 200 and page.is_html
    assert (await safefetch.fetch(f"{site.base}/gzip-ok", only_server)).text() == TAX_HTML
    port = site.server_address[1]
    failure = await _failure(safefetch.fetch(f"{site.base}/redirect?to=http://127.0.0.1:{port}/page/tax", only_server))
    assert failure.error.kind == "forbidden" and failure.error.error_code == "forbidden_address"  # ...its redirect not
    assert "loopback" in failure.error.message


@pytest.mark.parametrize("url", [
    "http://127.0.0.1/", "http://2130706433/", "http://[::1]/", "http://[::ffff:127.0.0.1]/",
    "http://10.0.0.1/", "http://192.168.1.1/", "http://0.0.0.0/", "http://localhost/",
])
async def test_private_addresses_refused_by_default(url: str) -> None:
    failure = await _failure(safefetch.fetch(url, safefetch.AddressPolicy()))
    assert failure.error.kind == "forbidden", failure.error


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/x", "gopher://x/", "http://u:p@example.com/"])
async def test_bad_schemes_and_userinfo_refused(url: str) -> None:
    failure = await _failure(safefetch.fetch(url, OPEN))
    assert failure.error.kind == "forbidden"


async def test_metadata_refused_even_with_allow_private(site) -> None:
    for target in ("http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/", "http://169.254.1.1/"):
        failure = await _failure(safefetch.fetch(f"{site.base}/redirect?to={target}", OPEN))
        assert failure.error.kind == "forbidden" and failure.error.error_code == "forbidden_address", target


async def test_oversized_binary_and_redirect_loops_refused(site) -> None:
    for path, code in [("/big", "too_large"), ("/big-declared", "too_large"), ("/gzip-bomb", "too_large"),
                       ("/bin", "unsupported_content"),
                       ("/loop", "too_many_redirects"), ("/status/404", "http_error")]:
        failure = await _failure(safefetch.fetch(f"{site.base}{path}", OPEN))
        assert (failure.error.error_code, failure.error.kind) == (code, "business"), path
    failure = await _failure(safefetch.fetch(f"{site.base}/status/503", OPEN))
    assert failure.error.kind == "transient"


# ---------------------------------------------------------------- pipeline
async def test_search_returns_reranked_untrusted_evidence(site) -> None:
    site.hits.clear()
    provider = SearxngProvider(f"{site.base}/sx/good")
    items = await pipeline.web_search("小规模纳税人 增值税 起征点", provider, OPEN, budget_s=5.0)
    assert 1 <= len(items) <= 5
    top = items[0]
    assert top.kind == "web" and top.url == f"{site.base}/page/tax"
    assert top.chunk_id.startswith(f"{site.base}/page/tax#") and top.locator == HOST
    assert "起征点" in top.title and "起征点" in top.text and len(top.text) <= 600
    assert all(i.metadata["untrusted"] is True and i.score is None for i in items)
    assert site.hits["/page/tax"] + site.hits["/page/tax/"] == 1  # duplicate URL fetched once


async def test_several_queries_are_searched_at_once_and_deduplicated(site) -> None:
    site.hits.clear()
    provider = SearxngProvider(f"{site.base}/sx/good")
    items = await pipeline.web_search("小规模纳税人 起征点", provider, OPEN, more_queries=["增值税 起征点", "起征点"],
                                      budget_s=5.0)
    assert items and items[0].url == f"{site.base}/page/tax"
    assert site.hits["/page/tax"] + site.hits["/page/tax/"] == 1  # the same URL from three queries: fetched once


async def test_budget_drops_hanging_page_and_keeps_others(site) -> None:
    extract.warm_up()
    provider = SearxngProvider(f"{site.base}/sx/budget")
    started = time.perf_counter()
    items = await pipeline.web_search("增值税 起征点", provider, OPEN, budget_s=2.0)  # /hang answers after 10 s
    elapsed = time.perf_counter() - started
    assert elapsed < 4.0, elapsed
    assert all(i.metadata["source"] == "web_search" for i in items)  # pages, not the snippet fallback
    urls = {i.url for i in items}
    assert f"{site.base}/page/tax" in urls and f"{site.base}/hang" not in urls


async def test_all_fetches_failing_returns_snippets(site) -> None:
    items = await pipeline.web_search("起征点", SearxngProvider(f"{site.base}/sx/dead"), OPEN, budget_s=3.0)
    assert len(items) == 3
    assert all(i.metadata["source"] == "search_snippet" and i.text.startswith("snippet of") for i in items)


async def test_no_results_is_a_business_failure(site) -> None:
    failure = await _failure(pipeline.web_search("x", SearxngProvider(f"{site.base}/sx/empty"), OPEN))
    assert (failure.error.error_code, failure.error.kind) == ("no_results", "business")


async def test_web_fetch_ranks_by_reason(site) -> None:
    reason = "what is the VAT threshold for small-scale taxpayers"
    items = await pipeline.web_fetch(f"{site.base}/page/tax", reason, OPEN)
    assert "VAT threshold" in items[0].text
    plain = await pipeline.web_fetch(f"{site.base}/page/plain", "", OPEN)
    assert plain[0].chunk_id.endswith("#1") and plain[0].title == HOST


async def test_a_call_run_again_reads_its_page_from_the_journal(site, redis) -> None:
    """Rule W5: the second run of one call (its first run's process died after the fetch) does not
    fetch again; another call does."""
    from services.web.journal import FetchJournal

    site.hits.clear()
    key = f"t-{uuid.uuid4().hex[:8]}:1:call_1"
    first = await pipeline.web_fetch(f"{site.base}/page/tax", "VAT threshold", OPEN, journal=FetchJournal(redis, key))
    again = await pipeline.web_fetch(f"{site.base}/page/tax", "VAT threshold", OPEN, journal=FetchJournal(redis, key))
    assert [e.text for e in again] == [e.text for e in first] and site.hits["/page/tax"] == 1
    await pipeline.web_fetch(f"{site.base}/page/tax", "VAT threshold", OPEN, journal=FetchJournal(redis, key + "x"))
    assert site.hits["/page/tax"] == 2


async def test_tavily_provider_and_configuration(site) -> None:
    hits = await TavilyProvider("tvly-test", endpoint=f"{site.base}/tavily/search").search("vat", 3)
    assert [h.url for h in hits] == [f"{site.base}/page/tax"] and hits[0].snippet == "tax snippet"
    with pytest.raises(ToolFailure):
        await TavilyProvider("wrong", endpoint=f"{site.base}/tavily/search").search("vat")
    assert "tvly-test" not in repr(TavilyProvider("tvly-test"))
    assert not web_tools_available(WebSettings(searxng_url=None, tavily_api_key=None))
    assert isinstance(configured_provider(WebSettings(searxng_url="http://sx:8080", tavily_api_key="k")), SearxngProvider)
    assert isinstance(configured_provider(WebSettings(searxng_url=None, tavily_api_key="k")), TavilyProvider)


# ---------------------------------------------------------------- bus round trip


async def test_bus_round_trip(site, settings: Settings) -> None:
    """The web ToolService in-process (``ToolService.serve`` minus its signal handlers) on the real broker."""
    settings = settings.changed({"searxng_url": f"{site.base}/sx/good", "web_allow_private": True})
    service = build_service(settings)
    await bus.ensure_topics(settings.bus)
    bus.subscribe(service.broker, settings.bus, service.redis, topic=service.topic, group_id=service.group_id,
                  model=ToolRequested, handler=service.handle, consumer_name=service.name)
    await service.broker.start()
    try:
        call_id, task_id = uuid.uuid4().hex, f"t-{uuid.uuid4().hex[:8]}"
        request = ToolRequested(task_id=task_id, session_id="s1", payload=ToolRequestPayload(
            call_id=call_id, tool="web_search", arguments={"query": "增值税 起征点", "reason": "test"},
            step=1, idempotency_key=f"{task_id}:1:{call_id}"))
        await bus.publish(service.broker, topics.TOOL_REQUESTS_WEB, request)
        result = await await_tool_result(settings.bus.bootstrap_servers(), call_id)
        assert result.payload.outcome == "ok", result.payload.error
        assert result.payload.evidence and result.payload.evidence[0].kind == "web"
        assert result.payload.evidence[0].metadata["untrusted"] is True
        assert result.causation_id == request.event_id and result.task_id == task_id
    finally:
        await service.broker.stop()
        await service.redis.aclose()
