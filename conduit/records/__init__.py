"""Shared Redis records: task event logs, task records, approvals, artifacts, and every Redis key (``keys``)."""
