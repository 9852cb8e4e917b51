"""The transformer (the only forward), the position IDs it is fed, and model files."""
