"""remat.numpy (being written)."""
