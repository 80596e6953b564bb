"""What tests of the `autorl` command share."""

from __future__ import annotations

from typing import Any


def error_line(result: Any) -> str:
    """A CLI result's single error line (a `typer.testing` result); it must be the last thing printed."""
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and result.output.rstrip().endswith(errors[0]), result.output
    return errors[0]
