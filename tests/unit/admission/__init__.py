"""Tests of ``webhook.admission``."""
