"""Helpers that are not public API."""
