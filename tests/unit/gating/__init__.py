"""Tests of ``webhook.gating``."""
