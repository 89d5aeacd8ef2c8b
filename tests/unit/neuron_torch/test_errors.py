"""neuron_torch.errors: the library's one exception type carries the user's message and the exit code (2 for bad input
unless told otherwise); MatrixError names the file, the key and the problem; the CLI exits with the error's code."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_torch.cli import main
from neuron_torch.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, MatrixError, NeuronTorchError, UnsupportedError
from neuron_torch.matrix import load_matrix


def test_the_exit_codes_are_distinct_and_usage_is_the_default() -> None:
    assert len({EXIT_OK, EXIT_FAILED, EXIT_USAGE}) == 3 and EXIT_OK == 0
    error = NeuronTorchError("no such cell; pick one")
    assert str(error) == "no such cell; pick one"
    assert error.exit_code == EXIT_USAGE
    assert NeuronTorchError("a check failed", EXIT_FAILED).exit_code == EXIT_FAILED


def test_matrix_error_names_the_file_the_key_and_the_problem(tmp_path: Path) -> None:
    error = MatrixError(tmp_path / "m.toml", "release.name", "must be a string")
    assert str(error) == f"{tmp_path / 'm.toml'}: release.name: must be a string"
    assert error.key == "release.name"
    assert isinstance(error, NeuronTorchError) and error.exit_code == EXIT_USAGE
    assert issubclass(UnsupportedError, NeuronTorchError)


def test_a_matrix_with_a_syntax_error_raises_matrix_error(tmp_path: Path) -> None:
    broken = tmp_path / "matrix.toml"
    broken.write_text("schema = \n")
    with pytest.raises(MatrixError, match=r"matrix\.toml: \(syntax\): ") as raised:
        load_matrix(broken)
    assert raised.value.key == "(syntax)"


def test_the_cli_exits_with_the_errors_code_and_prints_its_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "matrix.toml"
    broken.write_text("schema = \n")
    assert main(["--matrix", str(broken), "matrix"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("neuron-torch: error: ") and "(syntax)" in err
