"""Helpers shared by the tests (``from tests.support.<module> import ...``); ``tests/conftest.py`` keeps
the fixtures and the plain helpers of every test."""
