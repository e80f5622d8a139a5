"""The operator layer: CLI, embedded stack, local infrastructure, probes, evals, AsyncAPI, the HTTP client. The only layer that may import ``services.*``."""
