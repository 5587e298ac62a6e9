"""numpy's legacy global generator (``np.random.seed(s)`` then ``np.random.gamma``), in pure Python.

``vllm bench serve`` seeds numpy's global generator with ``--seed`` and draws each request's gap with
``np.random.gamma``; the same draws give the simulated client the very arrival times of the real run, not just the
same distribution (with a few dozen requests, two Poisson draws queue quite differently).

numpy's legacy ``RandomState`` is MT19937 seeded by ``init_genrand`` (Python's ``random.seed`` uses
``init_by_array``, another state), whose doubles are the same 53-bit ``genrand_res53`` as Python's
``random.random``; the gamma, exponential and gauss samplers follow numpy's ``legacy-distributions.c``.
"""

from __future__ import annotations

import math
import random

_MT_WORDS = 624
_MASK = 0xFFFFFFFF


class LegacyRandomState:
    """Draws as ``numpy.random.RandomState(seed)`` makes them (``seed`` a 32-bit unsigned integer)."""

    def __init__(self, seed: int) -> None:
        if not 0 <= seed <= _MASK:
            raise ValueError(f"a legacy numpy seed is 0 to 2**32 - 1, not {seed}")
        words = [seed]
        for index in range(1, _MT_WORDS):
            previous = words[-1]
            words.append((1812433253 * (previous ^ (previous >> 30)) + index) & _MASK)
        self._bits = random.Random()
        self._bits.setstate((3, (*words, _MT_WORDS), None))  # NOTE: position 624: regenerate before the first draw
        self._gauss: float | None = None

    def random_sample(self) -> float:
        return self._bits.random()

    def standard_exponential(self) -> float:
        return -math.log(1.0 - self.random_sample())

    def _standard_normal(self) -> float:
        """The polar Box-Muller method, which makes two values and keeps the second for the next call."""
        if self._gauss is not None:
            kept, self._gauss = self._gauss, None
            return kept
        while True:
            x1 = 2.0 * self.random_sample() - 1.0
            x2 = 2.0 * self.random_sample() - 1.0
            r2 = x1 * x1 + x2 * x2
            if 0.0 < r2 < 1.0:
                break
        f = math.sqrt(-2.0 * math.log(r2) / r2)
        self._gauss = f * x1
        return f * x2

    def standard_gamma(self, shape: float) -> float:
        if shape == 1.0:
            return self.standard_exponential()
        if shape == 0.0:
            return 0.0
        if shape < 1.0:
            while True:
                u = self.random_sample()
                v = self.standard_exponential()
                if u <= 1.0 - shape:
                    x = u ** (1.0 / shape)
                    if x <= v:
                        return x
                else:
                    y = -math.log((1.0 - u) / shape)
                    x = (1.0 - shape + shape * y) ** (1.0 / shape)
                    if x <= v + y:
                        return x
        b = shape - 1.0 / 3.0
        c = 1.0 / math.sqrt(9.0 * b)
        while True:
            while True:
                x = self._standard_normal()
                v = 1.0 + c * x
                if v > 0.0:
                    break
            v = v * v * v
            u = self.random_sample()
            if u < 1.0 - 0.0331 * (x * x) * (x * x):
                return b * v
            if math.log(u) < 0.5 * x * x + b * (1.0 - v + math.log(v)):
                return b * v

    def gamma(self, shape: float, scale: float) -> float:
        return scale * self.standard_gamma(shape)
