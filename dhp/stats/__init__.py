"""Meta-evaluation statistics: pure, vectorised functions over arrays (no I/O, no model calls).

- :mod:`dhp.stats.segment`: segment-level tau_b, pairwise accuracy with ties (acc_eq) and its tie-calibrated
  form acc*_eq (Deutsch et al. 2023) with the chosen threshold; ``judge_scores`` turns a long table
  (item, system, judge, score, human) into aligned arrays.
- :mod:`dhp.stats.permutation`: paired permutation tests of two judges on the same rows (PERM-BOTH,
  Deutsch et al. 2021, as mt-metrics-eval), one matrix of draws shared by every pair of judges.
- :mod:`dhp.stats.paired`: exact McNemar, paired bootstrap of a per-item statistic, item bootstrap of the
  segment statistics, Holm's adjustment.
- :mod:`dhp.stats.clusters`: significance clusters and ranks as in the WMT metrics findings.
- :mod:`dhp.stats.wilcoxon`: one-sided Wilcoxon signed-rank tests, every test of a table in one array
  pass (exact / permutation / normal null chosen by scipy's rule and recorded), a sign-flip null on the
  same ranks; one test is one row of it.
- :mod:`dhp.stats.combine`: harmonic-mean combination of p-values per row (the DHP paper's 1/Σ(1/p_j),
  Wilson's weighted harmonic mean, expert weights) and D = log_0.05 p.
- :mod:`dhp.stats.multitest`: Holm and Benjamini-Hochberg adjustment of a family of p-values.
- :mod:`dhp.stats.resample`: the item resampler (bootstrap indices or sign flips, drawn from a seed
  derived from the run seed and a group's key) whose draws every test of the group shares.

A segment-level leaderboard of several judges on the same items::

    js = judge_scores(long_table)                                   # human, scores (judges × rows), groups
    pairs = permutation_table(js.human, js.scores, js.judges, js.groups, "acc_eq_calibrated")
    pairs["p_holm"] = holm(pairs["p_two_sided"])                     # within the view
    values = dict(zip(pairs["judge_a"], pairs["value_a"])) | dict(zip(pairs["judge_b"], pairs["value_b"]))
    ranks = significance_ranks(values, pairs)                       # judge, value, position, rank
    boots = segment_bootstrap(js.human, js.scores, js.groups, "acc_eq_calibrated")  # judges × resamples
"""
