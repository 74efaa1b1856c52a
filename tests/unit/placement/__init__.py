"""Tests of ``webhook.placement``."""
