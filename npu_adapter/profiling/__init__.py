"""Profiling on the CPU reference (placeholder, filled below)."""
