"""Judge protocols beyond pointwise scoring: pairwise strategies (dhp.protocols.pairwise)."""
