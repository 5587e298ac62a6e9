"""Where a config comes from (preset, file, folder, Hub): every failure of the file system is one clear line."""

from __future__ import annotations

import pytest

from calculator import InvalidConfig, ModelNotFound, load_model_spec
from calculator.limits import MAX_CONFIG_BYTES


@pytest.mark.parametrize(("model", "named"), [
    ("/" + "a" * 300 + ".json", "File name too long"),  # ENAMETOOLONG from stat(): was an uncaught OSError
    ("./" + "d" * 300 + "/config.json", "File name too long"),
    ("~no_such_user_here/config.json", "cannot read ~no_such_user_here/config.json"),
    ("x" * 5000, "a model reference of 5,000 characters is not a Hub id, preset or path (at most 1,024)"),
    ("   ", "no model given"),
])
def test_unusable_names_are_model_not_found(model, named):
    with pytest.raises(ModelNotFound) as caught:
        load_model_spec(model)
    assert named in str(caught.value) and "\n" not in str(caught.value)


def test_a_file_too_large_to_be_a_config_is_refused_without_reading_it_all(tmp_path):
    big = tmp_path / "config.json"
    with big.open("wb") as handle:
        handle.truncate(MAX_CONFIG_BYTES * 4)  # sparse: 32 MiB of zeros
    with pytest.raises(InvalidConfig, match="larger than 8 MiB, so not a config.json"):
        load_model_spec(str(big))


def test_a_non_utf8_file_names_the_byte(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b'{"model_type": "llama\xe9"}')
    with pytest.raises(InvalidConfig, match=r"not UTF-8 text \(byte 0xe9 at offset 21\)"):
        load_model_spec(str(path))


def test_a_folder_without_config_and_an_unreadable_file(tmp_path):
    with pytest.raises(ModelNotFound, match="is a folder without a config.json"):
        load_model_spec(str(tmp_path))
    locked = tmp_path / "locked.json"
    locked.write_text("{}")
    locked.chmod(0)
    try:
        with pytest.raises((ModelNotFound, InvalidConfig)):
            load_model_spec(str(locked))  # root reads it anyway: then "{}" lacks the decoder fields
    finally:
        locked.chmod(0o600)
