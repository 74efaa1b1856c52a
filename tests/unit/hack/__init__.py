"""Tests of hack/'s scripts that need no control plane."""
