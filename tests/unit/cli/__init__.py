"""Tests of ``webhook.cli``."""
