"""Sizes as ``vllm serve`` reads them (vllm.utils.argparse_utils.human_readable_int) and byte formatting."""

from __future__ import annotations

import pytest

from calculator.units import format_bytes, parse_size


@pytest.mark.parametrize(("text", "expected"), [
    ("8G", 8 * 1024**3), ("8g", 8 * 1000**3), ("25.6k", 25_600), ("1K", 1024), ("2M", 2 * 1024**2),
    ("1T", 1024**4), ("131072", 131_072), ("+5", 5), ("1_000", 1000), (" 7G ", 7 * 1024**3), (12, 12), ("0", 0),
])
def test_the_sizes_vllm_accepts(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("inf", "not a size: 'inf'"),  # was int(float('inf')): OverflowError
    ("1e400", "not a size: '1e400'"),
    ("1e30", "not a size: '1e30'"),  # vLLM's int('1e30') refuses it too
    ("1.5", "not a size: '1.5'"),
    ("1.5G", "decimals are not allowed with binary suffixes like G ('1.5G'); did you mean 1.5g?"),
    ("8Gi", "not a size: '8Gi'"),
    ("-1", "size must not be negative"),
    ("", "not a size: ''"),
    ("9" * 100, "not a size: '" + "9" * 37 + "...'"),  # shown shortened, one line
])
def test_everything_else_is_a_value_error(text, message):
    with pytest.raises(ValueError) as caught:
        parse_size(text)
    assert message in str(caught.value)


def test_format_bytes():
    assert format_bytes(131_072) == "128.0 KiB" and format_bytes(512) == "512 B"
