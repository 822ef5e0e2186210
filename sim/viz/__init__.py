"""Figures of a sweep: the primitives (labels and units, palette, medians and bands, files with the same bytes for the
same data) and the standard presets."""
