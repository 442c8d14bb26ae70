"""Measurements of the service as a whole (not unit tests): ``python -m benchmarks.<name>``."""
