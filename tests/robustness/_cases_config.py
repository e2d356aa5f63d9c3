"""Issue 35's configuration cases: every number ``amdinfer serve`` takes from a flag, ``models.toml`` /
``models.json`` or a repository load request's config is finite and within its bounds (registered into the corpus
by ``_corpus.py``).

One validator checks them all (``amdinfer/serve/_bounds.py``, the table in docs/security.md, "Configuration
bounds"). A flag out of bounds is one usage line (exit 2) naming the flag, what was given and the accepted range;
a config file that is out of bounds, not UTF-8, not valid or nested too deeply is one ``OptionError`` naming the
file (and the table); a load request's config is the client's mistake (``InputError``, answered 400 /
``INVALID_ARGUMENT`` by the server: tests/serving/test_repository.py). None of these needs KServe.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from _corpus import CliResult, case, run_cli

from amdinfer.errors import InputError, OptionError
from amdinfer.serve._model_folder import parse_load_config, read_repository


def _flag_case(name: str, flags: list[str], match: str) -> None:
    """``amdinfer serve m.onnx FLAGS``: one usage line (exit 2) that matches ``match``."""

    def run(d: Path) -> object:
        try:
            run_cli(d, "serve", "m.onnx", *flags)
        except CliResult as result:
            assert result.stderr.count("\n") == 1, result.stderr  # one line, no traceback
            raise
        return None  # pragma: no cover - run_cli raises

    run.__name__ = name
    case("config", CliResult, rf"^exit 2: amdinfer serve: UsageError: argument {match}")(run)


_flag_case("config_serve_workers_per_device_1000", ["--workers-per-device", "1000"],
           r"--workers-per-device: got '1000', expected an int in 1\.\.\d+ \(4 per usable core")  # fmt: skip
_flag_case("config_serve_max_delay_nan", ["--max-delay-ms", "nan"],
           r"--max-delay-ms: got 'nan', expected a finite number in 0\.\.60000")  # fmt: skip
_flag_case("config_serve_max_delay_infinity", ["--max-delay-ms", "Infinity"],
           r"--max-delay-ms: got 'Infinity', expected a finite number in 0\.\.60000")  # fmt: skip
_flag_case("config_serve_max_delay_1e300", ["--max-delay-ms", "1e300"], r"--max-delay-ms: got '1e300'")
_flag_case("config_serve_max_batch_size_1e9", ["--max-batch-size", "1000000000"],
           r"--max-batch-size: got '1000000000', expected an int in 1\.\.4096")  # fmt: skip
_flag_case("config_serve_batch_bucket_2_30", ["--batch-buckets", "1,1073741824"],
           r"--batch-buckets: got 1073741824 \(item 1\), expected an int in 1\.\.4096")  # fmt: skip
_flag_case("config_serve_pipeline_threads_1e6", ["--pipeline-threads", "1000000"],
           r"--pipeline-threads: got '1000000', expected an int in 1\.\.256")  # fmt: skip
_flag_case("config_serve_max_request_bytes_inf", ["--max-request-bytes", "inf"],
           r"--max-request-bytes: got 'inf', expected an int in 1024\.\.2147483647")  # fmt: skip
_flag_case("config_serve_verify_sample_nan", ["--verify-sample", "nan"],
           r"--verify-sample: got 'nan', expected a finite number in 0\.\.1")  # fmt: skip


def _repository(d: Path, name: str, file: str, data: bytes) -> Path:
    """A fresh repository folder: the model as ``tiny.onnx`` and ``file`` holding ``data``."""
    f = d / name
    shutil.rmtree(f, ignore_errors=True)
    f.mkdir()
    shutil.copyfile(d / "m.onnx", f / "tiny.onnx")
    (f / file).write_bytes(data)
    return f


def _read(d: Path, name: str, file: str, data: bytes) -> object:
    f = _repository(d, name, file, data)
    try:
        read_repository(f)
    except OptionError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(f.resolve() / file)), str(exc)
        raise
    return None  # pragma: no cover - read_repository raises


@case("config", OptionError, r"models\.toml: \[models\.tiny\]: option 'max_delay_ms' got nan, expected a finite number")
def config_toml_max_delay_nan(d: Path) -> object:
    return _read(d, "toml_nan", "models.toml", b"[models.tiny]\nmax_delay_ms = nan\n")


@case("config", OptionError, r"models\.toml: \[defaults\]: option 'max_delay_ms' got inf")
def config_toml_defaults_max_delay_inf(d: Path) -> object:
    return _read(d, "toml_inf", "models.toml", b"[defaults]\nmax_delay_ms = inf\n")


@case("config", OptionError, r"\[models\.tiny\]: option 'batch_buckets' got 1073741824 \(item 0\), expected an int "
      r"in 1\.\.4096")  # fmt: skip
def config_toml_batch_bucket_2_30(d: Path) -> object:
    return _read(d, "toml_bucket", "models.toml", b"[models.tiny]\nbatch_buckets = [1073741824]\n")


@case("config", OptionError, r"models\.toml: not UTF-8 text \(byte 0xff at offset 27\); save it as UTF-8")
def config_toml_not_utf8(d: Path) -> object:
    return _read(d, "toml_bytes", "models.toml", b"[models.tiny]\nprecision = '\xff'\n")


@case("config", OptionError, r"models\.toml: not valid TOML: nested too deeply")
def config_toml_nested_too_deeply(d: Path) -> object:
    return _read(d, "toml_deep", "models.toml", b"a = " + b"[" * 100_000)


@case("config", OptionError, r"models\.json: \[models\.tiny\]: option 'max_delay_ms' got nan, expected a finite")
def config_json_nan(d: Path) -> object:
    return _read(d, "json_nan", "models.json", b'{"models": {"tiny": {"max_delay_ms": NaN}}}')


@case("config", OptionError, r"models\.json: not UTF-8 text \(byte 0xc3 at offset 2\)")
def config_json_latin1(d: Path) -> object:
    return _read(d, "json_latin1", "models.json", b'{"\xc3(": 1}')


@case("config", InputError, r"^load 'lazy': config: option 'max_delay_ms' got inf, expected a finite number")
def config_load_max_delay_infinity(d: Path) -> object:
    return parse_load_config("lazy", '{"max_delay_ms": Infinity}')


@case("config", InputError, r"^load 'lazy': config: option 'max_delay_ms' got 1e\+300, expected a finite number "
      r"in 0\.\.60000")  # fmt: skip
def config_load_max_delay_1e300(d: Path) -> object:
    return parse_load_config("lazy", '{"max_delay_ms": 1e300}')


@case("config", InputError, r"^load 'lazy': config: option 'batch_buckets' got 1073741824 \(item 0\)")
def config_load_batch_bucket_2_30(d: Path) -> object:
    return parse_load_config("lazy", '{"batch_buckets": [1073741824]}')
