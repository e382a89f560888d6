"""Packaging of built artifacts (Python wheels)."""
