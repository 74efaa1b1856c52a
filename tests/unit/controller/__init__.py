"""Tests of ``webhook.controller``."""
