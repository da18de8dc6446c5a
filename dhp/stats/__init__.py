"""Statistics shared by the workbench's methods: pure functions over arrays (no I/O, no model calls).

- :mod:`dhp.stats.wilcoxon`: one-sided Wilcoxon signed-rank tests, every test of a table in one array
  pass (exact / permutation / normal null chosen by scipy's rule and recorded), a sign-flip null on the
  same ranks; one test is one row of it.
- :mod:`dhp.stats.combine`: harmonic-mean combination of p-values per row (the DHP paper's 1/Σ(1/p_j),
  Wilson's weighted harmonic mean, expert weights) and D = log_0.05 p.
- :mod:`dhp.stats.multitest`: Holm and Benjamini-Hochberg adjustment of a family of p-values.
- :mod:`dhp.stats.resample`: the item resampler (bootstrap indices or sign flips, drawn from a seed
  derived from the run seed and a group's key) whose draws every test of the group shares.
"""
