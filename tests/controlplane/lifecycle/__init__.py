"""Tests of controlplane.lifecycle."""
