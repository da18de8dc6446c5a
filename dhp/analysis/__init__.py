"""Analyses: one module per meta-evaluation method (tables in, tables out)."""
