"""Gradient ops, one module per family."""
