"""Conformance tests for the local cloud's metadata endpoints."""
