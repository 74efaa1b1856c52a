"""Tests of ``webhook.planning``."""
