"""Tests that start real processes: ``segment-webhook serve`` under gunicorn, the benchmarks' servers
and clients, the container image (marker ``image``)."""
