"""The judging core: cases and their tensors, dtypes, the output contract, tolerances, comparison, statuses, the gradient check."""
