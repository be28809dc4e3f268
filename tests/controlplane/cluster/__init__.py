"""Tests of controlplane.cluster."""
