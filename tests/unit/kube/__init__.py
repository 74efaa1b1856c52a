"""Tests of ``webhook.kube``."""
