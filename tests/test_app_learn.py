"""The Learn page explains with the engine's own numbers for the chosen model."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

PAGE = str(Path(__file__).resolve().parents[1] / "pages" / "learn.py")


def run(model: str) -> AppTest:
    app = AppTest.from_file(PAGE, default_timeout=120)
    app.run()
    app.selectbox(key="learn_model").set_value(model)
    app.run()
    assert not app.exception
    return app


def test_gqa_saving_for_llama_8b():
    text = " ".join(md.value for md in run("meta-llama/Llama-3.1-8B-Instruct").markdown)
    # 32 layers x 32 heads x (128 + 128) x 2 B = 512 KiB as MHA; 8 KV heads -> 128 KiB.
    assert "**512 KiB per token**" in text and "**128.0 KiB**" in text and "4.0× less" in text


def test_mla_saving_for_deepseek_v3():
    text = " ".join(md.value for md in run("deepseek-ai/DeepSeek-V3").markdown)
    # MHA: 61 x 128 x (192 + 128) x 2 B = 4,880 KiB; MLA: 61 x 576 x 2 B = 68.6 KiB.
    assert "**4,880 KiB per token**" in text and "**68.6 KiB**" in text


def test_paged_blocks_waste_only_the_last_block():
    app = run("meta-llama/Llama-3.1-8B-Instruct")
    text = " ".join(md.value for md in app.markdown)
    # 70, 33, 120, 18 tokens at block 16: 5 + 3 + 8 + 2 blocks = 288 slots for 241 tokens.
    assert "hold 288 token slots for 241 tokens" in text and "(16.3% waste)" in text
