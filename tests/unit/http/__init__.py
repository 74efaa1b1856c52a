"""Tests of ``webhook.http``."""
