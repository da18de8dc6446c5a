"""Dataset loaders beyond the DHP datasets of dhp.data: human ratings for meta-evaluation."""
