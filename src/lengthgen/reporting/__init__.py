"""Figures, the HTML report and the docs' generated blocks, from the tables."""
