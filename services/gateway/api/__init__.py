"""The task API under ``/v1``: tasks and their streams, approvals and the trace, artifacts, sessions, memory;
and the health endpoints. Each module is one router (``app.create_app`` includes them)."""
