"""Meta-evaluation statistics: pure, vectorised functions over arrays (no I/O, no model calls).

- :mod:`dhp.stats.segment`: segment-level tau_b, pairwise accuracy with ties (acc_eq) and its tie-calibrated
  form acc*_eq (Deutsch et al. 2023) with the chosen threshold.
- :mod:`dhp.stats.permutation`: paired permutation tests of two judges on the same rows (PERM-BOTH,
  Deutsch et al. 2021), one matrix of draws shared by every pair of judges.
- :mod:`dhp.stats.paired`: exact McNemar, paired bootstrap of a per-item statistic, item-bootstrap of the
  segment statistics, Holm's adjustment.
- :mod:`dhp.stats.clusters`: significance clusters and ranks as in the WMT metrics findings.
"""
