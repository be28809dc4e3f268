"""Tests of controlplane.services."""
