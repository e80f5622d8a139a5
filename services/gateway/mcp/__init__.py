"""MCP at the gateway: Conduit as an MCP server (``out``: its tools; ``route``: ``/mcp`` over streamable HTTP)
and a tenant's registered MCP servers (``servers``: ``/v1/mcp-servers``)."""
