"""The package comes from the virtual environment's site-packages, with its stubs, and C++ status
codes map onto the documented exception types."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import mtpspec
from mtpspec import _ext


def test_imported_from_the_virtual_environment() -> None:
    package = Path(mtpspec.__file__).resolve().parent
    assert sys.prefix != sys.base_prefix, "tests must run inside a virtual environment"
    assert Path(sys.prefix).resolve() in package.parents
    assert (package / "py.typed").exists()
    assert (package / "_ext.pyi").exists()
    assert Path(_ext.__file__).parent == package
    assert mtpspec.__version__ == "0.1.0"


@pytest.mark.parametrize(
    "code, name, builtin",
    [
        (5, "NOT_FOUND", FileNotFoundError),
        (3, "INVALID_ARGUMENT", ValueError),
        (11, "OUT_OF_RANGE", ValueError),
    ],
)
def test_status_codes_map_to_builtin_exceptions(code: int, name: str, builtin: type) -> None:
    with pytest.raises(builtin, match="the message") as info:
        _ext._raise_status(code, "the message")
    assert isinstance(info.value, mtpspec.Error)
    assert info.value.code == name
    assert str(info.value) == "the message"


@pytest.mark.parametrize("code, name", [(9, "FAILED_PRECONDITION"), (13, "INTERNAL"), (15, "DATA_LOSS")])
def test_other_status_codes_raise_mtpspec_error(code: int, name: str) -> None:
    with pytest.raises(mtpspec.Error) as info:
        _ext._raise_status(code, "what went wrong")
    assert not isinstance(info.value, (ValueError, FileNotFoundError))
    assert info.value.code == name
    assert "what went wrong" in str(info.value)
