"""A small MCP server for the tests (stdio), written with the official ``mcp`` SDK.

Run as ``python -m testkit.mcp_server [--notes FILE]``. Tools:

- ``lookup_rate`` (read-only): the VAT rate of a goods category, from a fixed table;
- ``file_note`` (not read-only): appends ``{"title", "text"}`` as one JSON line to the notes
  file (``--notes``, default ``$CONDUIT_TEST_MCP_NOTES``) and returns a receipt number, so a
  test can count how often it really ran;
- ``broken`` (read-only): always fails (``is_error`` result).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

RATES = {"books": "9%", "software": "13%", "food": "9%", "services": "6%"}
"""The goods categories ``lookup_rate`` knows and their VAT rates."""


def build(notes: Path) -> MCPServer:
    """The test server; ``file_note`` appends to ``notes`` (a JSON-lines file)."""
    server = MCPServer("conduit-test-tools", log_level="WARNING")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def lookup_rate(category: str) -> str:
        """Look up the VAT rate of a goods category (books, software, food, services)."""
        rate = RATES.get(category.strip().lower())
        return f"The VAT rate for {category} is {rate}." if rate else f"No rate is known for {category}."

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
    def file_note(title: str, text: str) -> str:
        """File a note in the case file; returns its receipt number."""
        with notes.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"title": title, "text": text}, ensure_ascii=False) + "\n")
        count = sum(1 for _ in notes.open(encoding="utf-8"))
        return f"Note {title!r} filed as receipt R-{count:04d}."

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def broken() -> str:
        """A tool that always fails."""
        raise ToolError("this tool always fails")

    return server


def main() -> None:
    """Serve over stdio until stdin closes."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--notes", default=os.environ.get("CONDUIT_TEST_MCP_NOTES", "mcp-notes.jsonl"))
    build(Path(parser.parse_args().notes)).run("stdio")


if __name__ == "__main__":
    main()
