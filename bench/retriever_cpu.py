"""CPU of the retriever's own work, in one process (issue 33): a ``kb_search`` with OpenBLAS's default threads and
with rule K19's one, the parts of a search, and the model's help (rules K12, K13, K18).

    python -m bench.retriever_cpu [--n 40] [--pairs 500]

Ingests ``bench.e2e``'s three laws into a temporary store and opens the searcher as the service does (second
stage on, the shipped e5 law index), without model help. Then: ``--n`` searches 0.2 s apart (as in the stack:
OpenBLAS's workers spin after each call) with the default BLAS threads, then with one (``embeddings.limit_blas``);
the parts of a search with one thread; and ``--pairs`` rewrite + rerank pairs (``modelhelp.ModelHelp``, ten
300-character candidates) against the scripted model in a child process, so the figure is the caller's CPU only.
Prints CPU ms (``getrusage``, every thread of this process) and wall ms per item; writes nothing.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from bench.common import machine
from bench.e2e import ANSWER, KB_QUESTION, LAWS
from conduit.runtime.settings import Settings

QUESTION = KB_QUESTION[4:]
MODEL_CHILD = ("import sys, time; from testkit.scripted_model import ScriptedModel; "
               "m = ScriptedModel().start(); print(m.base_url, flush=True); sys.stdin.read()")
"""The scripted model in a child process: prints its base URL, stops when its stdin closes."""


def cpu_s() -> float:
    """CPU seconds of this process so far (user + system, every thread)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def per(name: str, n: int, fn: Callable[[int], object], pause_s: float = 0.0) -> None:
    """Print the CPU and wall ms per call of ``fn(i)`` over ``n`` calls (after 3 warm-ups), ``pause_s`` apart."""
    for i in range(3):
        fn(-1 - i)
    c0, t0 = cpu_s(), time.perf_counter()
    for i in range(n):
        fn(i)
        time.sleep(pause_s)
    cpu, wall = (cpu_s() - c0) / n * 1000, ((time.perf_counter() - t0) / n - pause_s) * 1000
    print(f"  {name}: {cpu:.1f} ms CPU, {wall:.1f} ms wall")


def model_help(base_url: str, pairs: int) -> None:
    """Rules K12, K13 (K18): CPU per rewrite + rerank pair in this process."""
    from services.retriever.modelhelp import ModelHelp  # noqa: PLC0415

    settings = Settings(openai_base_url=base_url, openai_api_key="k", model="scripted")
    helper = ModelHelp(settings.retrieval, settings.llm)
    docs = [f"《测试法》 第{k}条\n" + "小规模纳税人适用简易计税方法，征收率为百分之三。" * 6 for k in range(10)]

    def pair(i: int) -> None:
        for sent in (helper.rewrite(f"{QUESTION}（{i}）", 5.0), helper.rerank(QUESTION, docs, 5.0)):
            if isinstance(sent, Future):
                sent.result()

    per(f"model help, a rewrite + a rerank ({pairs} pairs)", pairs, pair)
    helper.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=40, help="searches per figure")
    ap.add_argument("--pairs", type=int, default=500, help="rewrite + rerank pairs")
    a = ap.parse_args()
    from services.retriever.embeddings import limit_blas  # noqa: PLC0415
    from services.retriever.ingest import ingest_law_db  # noqa: PLC0415
    from services.retriever.main import open_searcher  # noqa: PLC0415

    settings = Settings(data_dir=Path(tempfile.mkdtemp(prefix="conduit-retriever-cpu-")), openai_base_url=None)
    ingest_law_db(settings, law_names=LAWS, progress=False)
    searcher = open_searcher(settings)
    stage2 = searcher.stage2
    print(f"machine: {machine()} · {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"kb_search, {a.n} searches 0.2 s apart (distinct questions):")
    per("OpenBLAS default threads", a.n, lambda i: searcher.search(f"{QUESTION}（d{i}）", "default"), 0.2)
    limit_blas(1)
    per("one BLAS thread (rule K19)", a.n, lambda i: searcher.search(f"{QUESTION}（o{i}）", "default"), 0.2)
    print("parts of a search, one BLAS thread:")
    per("USE query embedding", a.n, lambda i: searcher.embedder.embed_queries([f"{QUESTION}（u{i}）"]))
    if stage2 is not None:
        per("e5 query embedding (one text)", a.n, lambda i: stage2.embedder.embed_queries([f"{QUESTION}（e{i}）"]))
        vectors = stage2.embedder.embed_queries([QUESTION, QUESTION + " 增值税"])
        per("e5 nearest over the law matrix", a.n, lambda i: stage2.nearest(vectors, 50))
    per("USE document embedding (a question and its answer)", a.n,
        lambda i: searcher.embedder.embed([f"{QUESTION}（m{i}）\n{ANSWER}"]))
    child = subprocess.Popen([sys.executable, "-c", MODEL_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        model_help(child.stdout.readline().strip(), a.pairs)
    finally:
        child.stdin.close()
        child.wait(timeout=10)
        searcher.store.close()


if __name__ == "__main__":
    main()
