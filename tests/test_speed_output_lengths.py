"""Output lengths of a run whose requests stop at EOS (calculator/speed/output_lengths.py): exponential quantiles
with the record's mean, capped by the request's max_tokens, spread over the run."""

from __future__ import annotations

import pytest

from calculator.speed.output_lengths import eos_output_lengths


def test_four_lengths_are_the_exponential_quantiles_of_the_mean_in_a_spread_order() -> None:
    # quantiles at 1/8, 3/8, 5/8, 7/8: -ln(7/8) = 0.13353, -ln(5/8) = 0.47000, -ln(3/8) = 0.98083,
    # -ln(1/8) = 2.07944; their mean is 0.91595, so the scale is 100 / 0.91595 = 109.176 and the lengths are
    # 14.58, 51.31, 107.08, 227.03 -> 15, 51, 107, 227. The stride round(4 x 0.618) = 2 shares a factor with 4,
    # so it is 3: indices 0, 3, 2, 1.
    assert eos_output_lengths(100, 4) == (15, 227, 107, 51)


def test_the_cap_holds_and_the_mean_is_kept() -> None:
    # quantiles -ln(3/4) = 0.287682 and -ln(1/4) = 1.386294; with a cap of 100 the mean 90 needs
    # 0.287682 s + 100 = 180, s = 278.08: lengths 80 and min(385.5, 100) = 100 (stride 1).
    assert eos_output_lengths(90, 2, cap_tokens=100) == (80, 100)
    # gpu_conc's outputs: max_tokens 1000, a mean of 930 over 336 requests
    lengths = eos_output_lengths(930, 336, cap_tokens=1000)
    assert max(lengths) == 1000 and abs(sum(lengths) / 336 - 930) < 0.5


def test_a_cap_equal_to_the_mean_puts_every_output_at_the_cap() -> None:
    assert eos_output_lengths(5, 3, cap_tokens=5) == (5, 5, 5)


def test_a_cap_below_the_mean_is_refused_with_a_sentence() -> None:
    with pytest.raises(ValueError, match="a cap of 50 tokens is below the mean of 100"):
        eos_output_lengths(100, 4, cap_tokens=50)
