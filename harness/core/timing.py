"""Repeated timing with a budget: warm-up calls, then at least `min_reps` and at most `max_reps` timed
calls, stopping once `seconds` have passed. Medians and the interquartile spread, never means: the
machines are shared and noisy."""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace

import numpy as np


@dataclass(frozen=True)
class Budget:
    warmup: int = 3
    min_reps: int = 12
    max_reps: int = 300
    seconds: float = 1.2
    rounds: int = 3  # the bench interleaves backends in this many rounds, sharing reps and seconds

    def per_round(self, first: bool) -> "Budget":
        """One round's share; warm-up calls only in the first round."""
        return replace(self, warmup=self.warmup if first else 1, min_reps=max(1, self.min_reps // self.rounds),
                       max_reps=max(1, self.max_reps // self.rounds), seconds=self.seconds / self.rounds, rounds=1)

    def as_dict(self) -> dict:  # crosses into worker processes
        return asdict(self)


QUICK = Budget(warmup=1, min_reps=3, max_reps=10, seconds=0.5, rounds=1)  # the reference, or `bench --quick`


def repeat(call, budget: Budget) -> list[float]:
    """Seconds per call of `call()`, one entry per timed repetition."""
    for _ in range(budget.warmup):
        call()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < budget.max_reps and (len(times) < budget.min_reps or time.perf_counter() - start < budget.seconds):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return times


def median_and_spread(times: list[float]) -> tuple[float, float]:
    """(median seconds, (p75 - p25) / median)."""
    q25, q50, q75 = np.percentile(np.asarray(times), [25, 50, 75])
    return float(q50), float((q75 - q25) / q50) if q50 > 0 else 0.0
