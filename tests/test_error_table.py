"""The one error table (amdinfer.errors.error_status): every AmdinferError kind has a row, the rows agree with
HTTP's and gRPC's meanings, docs/errors.md shows the same table, and the command line answers by it.

The REST server, the gRPC server and Ray answer by the same table: tests/serving/test_error_table.py.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from amdinfer import errors
from amdinfer.cli import main
from amdinfer.errors import AmdinferError, ErrorStatus, InputError, ModelError, error_status

DOCS = Path(__file__).resolve().parent.parent / "docs" / "errors.md"

#: gRPC's status code names (grpc/doc/statuscodes.md), written out: the tests venv has no grpc.
GRPC_CODES = {
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
    "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
    "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
}  # fmt: skip
#: The gRPC codes that say the caller's request was wrong (HTTP 4xx), and those that say the server failed (5xx).
CLIENT_CODES = {"INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "FAILED_PRECONDITION",
                "OUT_OF_RANGE", "UNAUTHENTICATED", "RESOURCE_EXHAUSTED"}  # fmt: skip
SERVER_CODES = {"INTERNAL", "UNAVAILABLE", "UNIMPLEMENTED", "UNKNOWN", "DATA_LOSS", "DEADLINE_EXCEEDED"}


def all_kinds() -> list[type[AmdinferError]]:
    """Every AmdinferError subclass amdinfer defines (walked from the base class, not read from a list)."""
    seen: list[type[AmdinferError]] = []
    todo: list[type[AmdinferError]] = [AmdinferError]
    while todo:
        kind = todo.pop()
        if kind not in seen and kind.__module__.startswith("amdinfer"):
            seen.append(kind)
            todo.extend(kind.__subclasses__())
    return seen


def make(kind: type[BaseException]) -> BaseException:
    return kind(f"{kind.__name__} raised by the test")


def test_every_kind_has_a_row_through_its_mro_and_the_row_is_consistent() -> None:
    kinds = all_kinds()
    public = {obj for obj in vars(errors).values() if inspect.isclass(obj) and issubclass(obj, AmdinferError)}
    assert public <= set(kinds) and len(kinds) >= 12, kinds
    for kind in kinds:
        row = error_status(kind)
        assert isinstance(row, ErrorStatus), kind
        assert error_status(make(kind)) == row  # an instance answers as its class
        assert row.grpc in GRPC_CODES, (kind, row)
        if 400 <= row.http < 500:
            assert row.grpc in CLIENT_CODES and row.client, (kind, row)
        else:
            assert row.http >= 500 and row.grpc in SERVER_CODES and not row.client, (kind, row)
        assert row.exit_code not in (0, 2, 3, 130), (kind, row)  # success, usage, not judged, interrupted


def test_a_subclass_inherits_its_parents_row_and_others_have_none() -> None:
    class Truncated(ModelError):
        pass

    class BadPixels(InputError, ModelError):  # the first base on the MRO wins
        pass

    assert error_status(Truncated("x")) == error_status(ModelError) == ErrorStatus(500, "INTERNAL", 1)
    assert error_status(BadPixels) == error_status(InputError) == ErrorStatus(400, "INVALID_ARGUMENT", 1)
    for other in (ValueError("x"), OSError("disk"), KeyError, KeyboardInterrupt()):
        assert error_status(other) is None


def docs_table() -> dict[str, tuple[int, str, int]]:
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## How each error is answered", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| (\d+) \| `(\w+)` \| (\d+) \|$", section, re.M)
    return {name: (int(http), grpc, int(code)) for name, http, grpc, code in rows}


def test_docs_show_the_table_of_the_code() -> None:
    shown = docs_table()
    expected = {k.__name__: (error_status(k).http, error_status(k).grpc, error_status(k).exit_code)  # type: ignore[union-attr]
                for k in all_kinds() if k.__name__ in errors.__all__}  # fmt: skip
    assert shown == expected


@pytest.fixture
def failing_command(monkeypatch: pytest.MonkeyPatch):
    """``amdinfer doctor`` raising the error it is given."""
    import amdinfer.cli._doctor as doctor

    def fail_with(exc: BaseException) -> None:
        def run(args: object) -> int:
            raise exc

        monkeypatch.setattr(doctor, "run", run)

    return fail_with


def test_cli_exits_with_each_kinds_code_in_one_line(failing_command, capsys) -> None:
    for kind in all_kinds():
        failing_command(make(kind))
        code = main(["doctor"])
        err = capsys.readouterr().err
        assert code == error_status(kind).exit_code, kind  # type: ignore[union-attr]
        assert err == f"amdinfer doctor: {kind.__name__}: {kind.__name__} raised by the test\n", err


def test_cli_reads_the_table(failing_command, monkeypatch, capsys) -> None:
    monkeypatch.setitem(errors._STATUSES, ModelError, ErrorStatus(500, "INTERNAL", 7))
    failing_command(errors.UnsupportedOperatorError("no Foo", operators=["Foo"]))  # no row: ModelError's
    assert main(["doctor"]) == 7
    assert "UnsupportedOperatorError: no Foo" in capsys.readouterr().err


def test_cli_keeps_its_defaults_for_other_exceptions(failing_command, capsys) -> None:
    failing_command(FileNotFoundError(2, "No such file or directory", "m.onnx"))
    assert main(["doctor"]) == 1
    assert capsys.readouterr().err.startswith("amdinfer doctor: FileNotFoundError: ")
    failing_command(KeyError("a bug"))
    with pytest.raises(KeyError):  # a bug keeps its traceback
        main(["doctor"])
    failing_command(KeyboardInterrupt())
    assert main(["doctor"]) == 130
