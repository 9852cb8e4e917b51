"""Training: one cell, a stack of seeds, and the loop core and optimizer they share."""
