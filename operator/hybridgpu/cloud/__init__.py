"""Capacity providers: where nodes of a pool come from (static owned hardware, AWS, fake)."""
