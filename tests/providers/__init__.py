"""Tests for spothop.providers."""
