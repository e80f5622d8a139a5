"""Documents and search over HTTP, served by the retriever over the bus (``routes``), and a question's scope
of documents and collections (``scope``, rule Q1)."""
