"""Tests of controlplane.core."""
