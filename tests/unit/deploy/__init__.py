"""Tests of deploy/ (the kustomize overlays, the Helm chart, the Dockerfile)."""
