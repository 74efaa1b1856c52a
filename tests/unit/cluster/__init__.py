"""Tests of ``webhook.cluster``."""
