"""Tests on the local control plane (marker ``cluster``) and on a real node (marker ``node``)."""
