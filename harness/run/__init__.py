"""A conformance run: the engine that runs one case on a backend, the checks around it, waivers, results, the run directory and the gate."""
