"""vLLM version strings: releases parse, garbage and impossible majors are refused, newer releases are named."""

from __future__ import annotations

import pytest

from calculator import UnsupportedVllmVersion
from calculator.engine.vllm_versions import VllmVersion, version_notice


@pytest.mark.parametrize(("text", "parsed"), [
    ("0.34.0", "0.34.0"), ("0.32", "0.32.0"), ("v0.8.5", "0.8.5"), ("0.6.6.post1", "0.6.6"),
    ("0.10.1rc1", "0.10.1"), ("0.11.0+cu128", "0.11.0"), ("0.9.2.dev123+g1a2b3c", "0.9.2"), (" 0.20.1 ", "0.20.1"),
])
def test_released_version_strings_parse(text, parsed):
    assert str(VllmVersion.parse(text)) == parsed


@pytest.mark.parametrize(("text", "message"), [
    ("1e20.0", "not a vLLM version: '1e20.0'"),  # issue 10 item 7: became "99.0.0" in links
    ("0.34.0garbage", "not a vLLM version"),
    ("99.0", "vLLM 99.0 is not a vLLM release: the newest we model is 0.34 and vLLM is still at 0.x"),
    ("2.0", "is not a vLLM release"),
    ("0.3.0", "predates the versions we model"),
    ("0.99999.0", "not a vLLM version"),
    ("banana", "not a vLLM version"),
])
def test_impossible_versions_are_refused(text, message):
    with pytest.raises(UnsupportedVllmVersion, match=message.replace("(", r"\(").replace(")", r"\)")):
        VllmVersion.parse(text)


def test_a_newer_release_says_whose_rules_are_used_and_a_modelled_one_says_nothing():
    assert version_notice("0.35.0") == ("vLLM 0.35.0 is newer than the newest release modelled (0.34): its figures "
                                        "use vLLM 0.34's rules, which may have changed since")
    assert version_notice("1.0").startswith("vLLM 1.0.0 is newer")
    assert version_notice("0.34.7") is None and version_notice("0.4.3") is None and version_notice("0.20") is None
