"""The transformer (the only forward) and the position IDs it is fed."""
