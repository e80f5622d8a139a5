"""Conduit's contracts: the pydantic models of every event and API body, topics and keys.

This package is the single source of truth: nothing is sent on the bus or over
HTTP that has no model here.
"""
