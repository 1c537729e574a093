"""Tests for the embedded local cloud."""
