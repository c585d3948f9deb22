"""`opconform bench`: openmp, ort, reference and torch timed on the same inputs in one run, against
the machine's measured limits (triad bandwidth, sgemm GFLOP/s). See runner.py for the flow."""
