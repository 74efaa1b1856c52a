"""Tests of ``webhook.topology``."""
