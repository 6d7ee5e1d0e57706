"""Helpers shared by the tests (catalog generators, CUDA emulation, fixtures)."""
