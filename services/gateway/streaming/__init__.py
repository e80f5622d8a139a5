"""Streaming task logs to clients: one shared Redis reader per process (``hub``), each stream's view of it
(``subscription``) and the SSE wire format (``sse``)."""
