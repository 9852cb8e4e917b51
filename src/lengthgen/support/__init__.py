"""Keeping the workflow running: errors, files, identities, devices, digests, the warm-start server."""
