"""Tests (a package, so test module names may repeat across folders)."""
