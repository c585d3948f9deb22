"""`opconform model`: the gradient nodes of a real training graph, grouped into configurations, each run through the
spec it matches (harness.model.census finds them, harness.model.match turns one into case params, harness.model.emit
writes them as case groups, harness.model.command runs them and writes the model report)."""
