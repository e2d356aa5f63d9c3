"""The one table of bounds of ``amdinfer serve`` (issue 35): every number from a flag, ``models.toml`` or a
repository load request's config is of its type, finite and within its documented bounds.

No server and no KServe: the validator, the folder reader, the load-config parser, the batcher, the
supervisor's check and the command line's parser are pure Python. The truth is the table's own numbers and
the bounds written in docs/security.md.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import onnx
import pytest

from amdinfer.cli import build_parser
from amdinfer.errors import InputError, OptionError
from amdinfer.serve import DynamicBatcher
from amdinfer.serve._bounds import (
    BOUNDS,
    FLAG,
    MAX_BUCKETS,
    check,
    check_buckets,
    check_finite,
    check_flag,
    max_workers_per_device,
)
from amdinfer.serve._model_folder import parse_load_config, read_repository
from amdinfer.serve._supervisor import check_workers_per_device, serve_processes
from amdinfer.testing.models import tiny_cnn

#: the bounds docs/security.md documents (a change to the table must change the docs, and this)
DOCUMENTED = {
    "max_delay_ms": (0, 60_000),
    "max_batch_size": (1, 4096),
    "batch_bucket": (1, 4096),
    "pipeline_threads": (1, 256),
    "max_request_bytes": (1024, 2**31 - 1),
    "verify_sample": (0, 1),
    "http_port": (0, 65535),
    "grpc_port": (0, 65535),
    "max_image_pixels": (1, 2**30),
}
NOT_FINITE = [math.nan, math.inf, -math.inf]


def repr_id(value: object) -> str:
    return repr(value)[:12]


class TestTable:
    def test_the_table_is_the_documented_one(self) -> None:
        assert {k: (b.low, b.upper()) for k, b in BOUNDS.items() if k != "workers_per_device"} == DOCUMENTED
        assert BOUNDS["workers_per_device"].low == 1
        assert BOUNDS["workers_per_device"].upper() == max_workers_per_device()

    def test_docs_list_every_option(self) -> None:
        text = (Path(__file__).parents[1] / "docs" / "security.md").read_text()
        section = text[text.index("### Configuration bounds") :]
        for option, (low, high) in DOCUMENTED.items():
            assert re.search(rf"`{option}`.*\b{low}\b.*\b{high}\b", section.replace(",", "")), option
        assert "`workers_per_device`" in section

    def test_workers_per_device_comes_from_the_host(self) -> None:
        assert [max_workers_per_device(c) for c in (1, 2, 15, 16, 17, 128)] == [4, 8, 60, 64, 64, 64]

    @pytest.mark.parametrize("option", sorted(BOUNDS))
    def test_ends_are_taken_and_past_them_refused(self, option: str) -> None:
        b = BOUNDS[option]
        low, high = b.low, b.upper()
        assert check(option, b.kind(low)) == low and check(option, b.kind(high)) == high
        step = 1 if b.kind is int else 1e-9 * max(1.0, high)
        shown = f"{low:g}..{high:g}" if b.kind is float else f"{int(low)}..{int(high)}"
        for bad in (low - step, high + step):
            with pytest.raises(OptionError, match=rf"^{option}: got .*, expected .* in {re.escape(shown)}"):
                check(option, b.kind(bad))

    @pytest.mark.parametrize("option", sorted(BOUNDS))
    @pytest.mark.parametrize("bad", [*NOT_FINITE, True, False, "4", None, [4], 1e300, 10**400], ids=repr_id)
    def test_wrong_types_and_non_finite_numbers_are_refused(self, option: str, bad: object) -> None:
        with pytest.raises(OptionError, match=rf"^{option}: got "):
            check(option, bad)

    @pytest.mark.parametrize("option", [k for k, b in BOUNDS.items() if b.kind is int])
    def test_an_int_option_refuses_floats(self, option: str) -> None:
        with pytest.raises(OptionError, match="expected an int"):
            check(option, float(BOUNDS[option].upper()))

    def test_numpy_scalars_are_numbers(self) -> None:
        assert check("max_batch_size", np.int64(8)) == 8 and type(check("max_batch_size", np.int64(8))) is int
        assert check("max_delay_ms", np.float32(2.5)) == 2.5
        with pytest.raises(OptionError):
            check("max_batch_size", np.bool_(True))


class TestWhere:
    def test_the_message_names_where_the_value_came_from(self) -> None:
        with pytest.raises(OptionError, match=r"^max_delay_ms: got inf, expected a finite number in 0\.\.60000"):
            check("max_delay_ms", math.inf)
        with pytest.raises(OptionError, match=r"^--max-delay-ms: got inf,"):
            check("max_delay_ms", math.inf, FLAG)
        with pytest.raises(OptionError, match=r"^models.toml: \[models.x\]: option 'max_delay_ms' got inf,"):
            check("max_delay_ms", math.inf, "models.toml: [models.x]")

    @pytest.mark.parametrize("text", ["nan", "inf", "-1", "60000.5", "1e300", "abc", ""])
    def test_flag_text_is_shown_as_given(self, text: str) -> None:
        with pytest.raises(OptionError, match=rf"^--max-delay-ms: got {re.escape(repr(text))}, expected"):
            check_flag("max_delay_ms", text)

    def test_flags_parse(self) -> None:
        assert check_flag("max_batch_size", " 64 ") == 64 and check_flag("max_delay_ms", "0.5") == 0.5
        with pytest.raises(OptionError, match=r"^--max-batch-size: got '2.5'"):
            check_flag("max_batch_size", "2.5")

    def test_the_workers_message_says_why(self) -> None:
        with pytest.raises(OptionError, match=r"4 per usable core, \d+ here, and 64 at most: each process holds"):
            check("workers_per_device", 1000)


class TestBuckets:
    def test_buckets(self) -> None:
        assert check_buckets([1, 8, 4096]) == (1, 8, 4096)
        assert check_buckets(list(range(1, MAX_BUCKETS + 1))) == tuple(range(1, MAX_BUCKETS + 1))

    @pytest.mark.parametrize(
        ("buckets", "match"),
        [
            ([1073741824], r"got 1073741824 \(item 0\), expected an int in 1\.\.4096"),
            ([8, 0], r"got 0 \(item 1\)"),
            ([8, True], r"got True \(item 1\)"),
            ([8, 2.0], r"got 2.0 \(item 1\)"),
            ([math.nan], r"got nan \(item 0\)"),
            ([], r"got 0 batch sizes, expected 1 to 64"),
            (list(range(1, MAX_BUCKETS + 2)), r"got 65 batch sizes, expected 1 to 64"),
            ("8,16", r"got '8,16', expected a list of 1 to 64 batch sizes"),
            (8, r"got '8', expected a list of 1 to 64 batch sizes"),
        ],
    )
    def test_bad_buckets(self, buckets: object, match: str) -> None:
        with pytest.raises(OptionError, match=rf"^load 'x': config: option 'batch_buckets' {match}"):
            check_buckets(buckets, "load 'x': config")

    def test_finite_everywhere(self) -> None:
        check_finite({"a": [1, 2.5, {"b": "nan"}]}, "w")  # a string "nan" is not a number
        with pytest.raises(OptionError, match=r"^w: option 'a\[2\].b' got -inf"):
            check_finite({"a": [1, 2.5, {"b": -math.inf}]}, "w")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    onnx.save(tiny_cnn(), tmp_path / "tiny.onnx")
    return tmp_path


class TestModelsToml:
    @pytest.mark.parametrize(
        ("toml", "match"),
        [
            ("max_delay_ms = nan", r"option 'max_delay_ms' got nan, expected a finite number"),
            ("max_delay_ms = inf", r"option 'max_delay_ms' got inf"),
            ("max_delay_ms = 1e300", r"option 'max_delay_ms' got 1e\+300"),
            ("max_batch_size = 100000", r"option 'max_batch_size' got 100000, expected an int in 1\.\.4096"),
            ("max_batch_size = true", r"option 'max_batch_size' got True"),
            ("max_batch_size = 8.0", r"option 'max_batch_size' got 8.0"),
            ("batch_buckets = [1073741824]", r"option 'batch_buckets' got 1073741824 \(item 0\)"),
            ("recipe = 'yolo'\nrecipe_options = { pipeline_threads = 1000 }",
             r"recipe_options: option 'pipeline_threads' got 1000, expected an int in 1\.\.256"),
            ("recipe = 'yolo'\nrecipe_options = { conf = nan }", r"option 'recipe_options.conf' got nan"),
        ],
    )  # fmt: skip
    def test_numbers_out_of_bounds_name_the_file_and_table(self, folder: Path, toml: str, match: str) -> None:
        (folder / "models.toml").write_text(f"[models.tiny]\n{toml}\n")
        toml_file = re.escape(str(folder / "models.toml"))
        with pytest.raises(OptionError, match=rf"^{toml_file}: \[models.tiny\]: .*{match}"):
            read_repository(folder)

    def test_defaults_table_and_server_defaults_too(self, folder: Path) -> None:
        (folder / "models.toml").write_text("[defaults]\nmax_delay_ms = -inf\n")
        with pytest.raises(OptionError, match=r"models.toml: \[defaults\]: option 'max_delay_ms' got -inf"):
            read_repository(folder)
        (folder / "models.toml").write_text("")
        with pytest.raises(OptionError, match=r"^server defaults: option 'max_batch_size' got 0"):
            read_repository(folder, {"max_batch_size": 0})

    def test_in_bounds_values_are_taken(self, folder: Path) -> None:
        (folder / "models.toml").write_text("[models.tiny]\nmax_delay_ms = 60000\nbatch_buckets = [1, 4096]\n")
        tiny = read_repository(folder)["tiny"]
        assert not isinstance(tiny, str)
        assert (tiny.max_delay_ms, tiny.batch_buckets) == (60000, (1, 4096))

    @pytest.mark.parametrize("name", ["models.toml", "models.json"])
    def test_non_utf8_is_one_line_naming_the_file(self, folder: Path, name: str) -> None:
        data = b"[models.tiny]\nprecision = '\xff\xfe'\n"
        (folder / name).write_bytes(data)
        with pytest.raises(OptionError) as info:
            read_repository(folder)
        offset = data.index(b"\xff")
        assert str(info.value) == f"{folder / name}: not UTF-8 text (byte 0xff at offset {offset}); save it as UTF-8"

    @pytest.mark.parametrize(
        ("text", "match"),
        [
            (
                '{"models": {"tiny": {"max_delay_ms": NaN}}}',
                r"\[models.tiny\]: option 'max_delay_ms' got nan, expected",
            ),
            ('{"models": {"tiny": {"max_delay_ms": Infinity}}}', r"\[models.tiny\]: option 'max_delay_ms' got inf"),
            ('{"defaults": {"providers": [NaN]}}', r"\[defaults\]: option 'providers' got \[nan\]"),
            ('{"models": {"tiny": {"max_delay_ms": 1e400}}}', r"\[models.tiny\]: option 'max_delay_ms' got inf"),
            ('{"models": {"tiny": {"max_batch_size": 1' + "0" * 5000 + "}}}", r"not valid JSON: .*digits"),
            ("[" * 100_000, r"not valid JSON: nested too deeply"),
            ('{"models": ', r"not valid JSON: Expecting value"),
        ],
    )
    def test_json_config_file(self, folder: Path, text: str, match: str) -> None:
        (folder / "models.json").write_text(text)
        with pytest.raises(OptionError, match=rf"^{re.escape(str(folder / 'models.json'))}: {match}") as info:
            read_repository(folder)
        assert "\n" not in str(info.value)

    def test_deep_toml_is_one_line(self, folder: Path) -> None:
        (folder / "models.toml").write_text("a = " + "[" * 100_000)
        with pytest.raises(OptionError, match=r"models.toml: not valid TOML") as info:
            read_repository(folder)
        assert "\n" not in str(info.value)


class TestLoadConfig:
    @pytest.mark.parametrize(
        ("config", "match"),
        [
            ('{"max_delay_ms": Infinity}', r"config: option 'max_delay_ms' got inf, expected a finite number in "
                                           r"0\.\.60000"),
            ('{"max_delay_ms": -Infinity}', r"config: option 'max_delay_ms' got -inf"),
            ('{"max_delay_ms": NaN}', r"config: option 'max_delay_ms' got nan"),
            ('{"max_batch_size": NaN}', r"config: option 'max_batch_size' got nan, expected an int"),
            ('{"precision": NaN}', r"config: option 'precision' got nan"),
            ('{"recipe_options": {"conf": NaN}}', r"config: option 'recipe_options.conf' got nan"),
            ('{"max_delay_ms": 1e300}', r"config: option 'max_delay_ms' got 1e\+300, expected a finite number in "
                                        r"0\.\.60000"),
            ('{"max_delay_ms": 1e400}', r"config: option 'max_delay_ms' got inf"),
            ('{"batch_buckets": [1073741824]}', r"config: option 'batch_buckets' got 1073741824 \(item 0\)"),
            ('{"max_batch_size": 4097}', r"config: option 'max_batch_size' got 4097"),
            ('{"max_batch_size": 1' + "0" * 5000 + "}", r"not valid JSON: .*digits"),
            ('{"recipe_options": {"iou": 1e999}}', r"config: option 'recipe_options.iou' got inf"),
            (b'{"precision": "\xff"}', r"not valid JSON: 'utf-8' codec can't decode"),
            ("[" * 100_000, r"not valid JSON: nested too deeply"),
        ],
    )  # fmt: skip
    def test_refused_as_the_clients_mistake(self, config: str | bytes, match: str) -> None:
        with pytest.raises(InputError, match=rf"^load 'lazy': (parameter 'config' is )?{match}") as info:
            parse_load_config("lazy", config)
        assert "\n" not in str(info.value)

    def test_an_object_is_checked_too(self) -> None:
        with pytest.raises(InputError, match=r"config: option 'max_delay_ms' got nan"):
            parse_load_config("lazy", {"max_delay_ms": math.nan})
        assert parse_load_config("lazy", json.dumps({"max_delay_ms": 60000, "batch_buckets": [1, 8]})) == {
            "max_delay_ms": 60000.0,
            "batch_buckets": (1, 8),
        }


class TestCallers:
    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"max_delay_ms": math.inf}, r"^max_delay_ms: got inf"),
            ({"max_delay_ms": math.nan}, r"^max_delay_ms: got nan"),
            ({"max_delay_ms": 60_001}, r"^max_delay_ms: got 60001"),
            ({"max_batch_size": 1 << 30}, r"^max_batch_size: got 1073741824"),
        ],
    )
    def test_the_batcher(self, kwargs: dict, match: str) -> None:
        class Worker:
            name = "w"

        with pytest.raises(OptionError, match=match):
            DynamicBatcher([Worker()], **kwargs)

    def test_the_supervisor(self) -> None:
        top = max_workers_per_device()
        assert check_workers_per_device(top) == top
        with pytest.raises(OptionError, match=rf"^workers_per_device: got {top + 1}, expected an int in 1\.\.{top}"):
            check_workers_per_device(top + 1)
        with pytest.raises(OptionError, match=r"^workers_per_device: got 1000"):
            serve_processes([["serve"]] * 1000, workers_per_device=1000)  # refused before any child starts

    @pytest.mark.parametrize(
        ("flags", "match"),
        [
            (["--workers-per-device", "1000"], r"argument --workers-per-device: got '1000', expected an int in 1\.\."),
            (["--max-delay-ms", "Infinity"], r"argument --max-delay-ms: got 'Infinity', expected a finite number"),
            (["--max-batch-size", "0"], r"argument --max-batch-size: got '0'"),
            (["--batch-buckets", "8,1073741824"], r"argument --batch-buckets: got 1073741824 \(item 1\)"),
            (["--pipeline-threads", "257"], r"argument --pipeline-threads: got '257', expected an int in 1\.\.256"),
            (["--verify-sample", "nan"], r"argument --verify-sample: got 'nan'"),
            (["--max-request-bytes", "inf"], r"argument --max-request-bytes: got 'inf', expected an int in 1024\.\."),
            (["--max-request-bytes", "2G"], r"argument --max-request-bytes: got '2G'"),
        ],
    )  # fmt: skip
    def test_the_command_line(self, flags: list[str], match: str) -> None:
        with pytest.raises(Exception, match=match) as info:
            build_parser().parse_args(["serve", "m.onnx", *flags])
        assert type(info.value).__name__ == "_UsageError"

    def test_the_command_line_takes_the_ends(self) -> None:
        top = max_workers_per_device()
        args = build_parser().parse_args(
            ["serve", "m.onnx", "--workers-per-device", str(top), "--max-delay-ms", "60000", "--max-batch-size",
             "4096", "--batch-buckets", "1,4096", "--pipeline-threads", "auto", "--max-request-bytes", "1K"]
        )  # fmt: skip
        assert (args.workers_per_device, args.max_delay_ms, args.max_batch_size) == (top, 60000.0, 4096)
        assert (args.batch_buckets, args.pipeline_threads, args.max_request_bytes) == ((1, 4096), None, 1024)
