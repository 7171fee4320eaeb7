"""Helpers shared by the test tiers (the real control plane, fake GPU nodes, GPU Jobs)."""
