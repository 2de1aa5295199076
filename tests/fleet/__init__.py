"""Helpers of tests/test_fleet.py: podman as this kind of sandbox runs it, a stand-in for the
official sglang image, a local package index, the .dockerignore rules."""
