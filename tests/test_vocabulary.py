"""One vocabulary across Python, the CLI and the server: ``cache``, ``calibration``, ``precision``, ``providers``.

A property over the public surface, so that it fails when someone adds ``use_cache=`` (or ``--use-cache``,
``--provider``, ``calib=``) again: every public recipe function, :func:`amdinfer.load`, the quantizers, the option
records of the engines and every subcommand's parser are walked, and each name that speaks of one of the four
concepts must be the table's spelling (docs/cli.md#one-vocabulary).
"""

from __future__ import annotations

import argparse
import inspect
import re

import pytest

import amdinfer
import amdinfer.quantize
import amdinfer.text
from amdinfer.cli._main import build_parser
from amdinfer.engines.migraphx import MigraphxOptions
from amdinfer.engines.ort import OrtOptions
from amdinfer.engines.reference import ReferenceOptions
from amdinfer.testing.models import tiny_cnn, yolov8

#: Python keyword -> CLI flags; the table of docs/cli.md.
VOCABULARY = {
    "cache": ("--cache", "--no-cache"),
    "cache_dir": ("--cache-dir",),
    "calibration": ("--calibration",),
    "precision": ("--precision",),
    "providers": ("--providers",),
}
#: Names that speak of the concepts and are right: the table plus the few that name something else.
PYTHON_ALLOWED = {*VOCABULARY, "cache_hit", "model_cache_dir", "provider_options", "precision_quantizer"}
CLI_ALLOWED = {f for flags in VOCABULARY.values() for f in flags} | {
    "--provider-option",  # one raw option of the first provider: a different thing from the list of providers
    "--against-providers",  # verify's other side
    "--reference-precision",  # verify's other side
}
CONCEPT = re.compile(r"cach|calib|precision|provider|dtype_mode|quant_data")

RECIPES = {"yolo": amdinfer.yolo, "classify": amdinfer.classify, "ocr": amdinfer.ocr, "embed": amdinfer.text.embed}
QUANTIZERS = [
    getattr(amdinfer.quantize, n)
    for n in amdinfer.quantize.__all__
    if inspect.isclass(getattr(amdinfer.quantize, n)) and n.endswith("Quantizer")
]
#: Commands that load a model and take the engine flags; the exceptions, with their reason.
LOADING = ["run", "predict", "val", "bench", "profile", "verify", "compile", "quantize", "serve"]
NOT_YET = {
    ("predict", "--calibration"): "predict/val have no int8 path yet (their precision is fp32/fp16)",
    ("val", "--calibration"): "predict/val have no int8 path yet (their precision is fp32/fp16)",
    ("serve", "--calibration"): "serve loads what compile/quantize built; int8 is calibrated there",
    ("serve", "--cache"): "serve's engines use the cache when $AMDINFER_CACHE_DIR is set (cache=None)",
    ("serve", "--no-cache"): "as --cache",
    ("serve", "--cache-dir"): "as --cache",
}


def _parameters(fn: object) -> list[str]:
    return list(inspect.signature(fn).parameters)


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.mark.parametrize(
    "where, names",
    [
        ("amdinfer.load", _parameters(amdinfer.load)),
        *[(f"amdinfer.{name}", _parameters(fn)) for name, fn in RECIPES.items()],
        *[(q.__name__, _parameters(q)) for q in QUANTIZERS],
        *[(r.__name__, list(r.option_names())) for r in (OrtOptions, MigraphxOptions, ReferenceOptions)],
    ],
)
def test_python_names_are_the_vocabulary(where, names) -> None:
    odd = [n for n in names if CONCEPT.search(n) and n not in PYTHON_ALLOWED]
    assert not odd, f"{where}: {odd} speak of cache/calibration/precision/providers in another spelling"


def test_the_engines_that_keep_artefacts_take_cache_and_cache_dir() -> None:
    for record in (OrtOptions, MigraphxOptions):
        assert {"cache", "cache_dir"} <= set(record.option_names()), record.__name__
    assert "cache" in _parameters(amdinfer.quantize.Int8Quantizer)


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipes_take_calibration_and_pass_the_rest_to_load(name) -> None:
    params = inspect.signature(RECIPES[name]).parameters
    assert "calibration" in params
    assert any(p.kind is p.VAR_KEYWORD for p in params.values())  # precision=, providers=, cache= go to load
    assert {"precision", "providers"} <= set(_parameters(amdinfer.load))


@pytest.mark.parametrize("command", sorted(_subparsers()))
def test_cli_flags_are_the_vocabulary(command) -> None:
    flags = {o for a in _subparsers()[command]._actions for o in a.option_strings}
    odd = sorted(f for f in flags if CONCEPT.search(f) and f not in CLI_ALLOWED)
    assert not odd, f"amdinfer {command}: {odd} spell a concept of the vocabulary another way"
    if command in LOADING:
        for flag in sorted(CLI_ALLOWED - {"--provider-option", "--against-providers", "--reference-precision"}):
            if (command, flag) not in NOT_YET:
                assert flag in flags, f"amdinfer {command} lacks {flag}"


def test_the_cli_cache_switch_becomes_the_python_keyword() -> None:
    from amdinfer.cli._load_args import cache_options

    assert cache_options(argparse.Namespace(cache=False, cache_dir=None), "ort") == {"cache": False}
    assert cache_options(argparse.Namespace(cache=None, cache_dir="d"), "ort") == {"cache": True, "cache_dir": "d"}


class TestMisspeltOptions:
    """A misspelt keyword is an OptionError (a TypeError) with the closest names, never the whole list."""

    @pytest.mark.parametrize("backend", ["auto", "ort"])
    def test_old_use_cache_points_at_cache(self, backend) -> None:
        with pytest.raises(amdinfer.OptionError) as exc:
            amdinfer.load(tiny_cnn(), backend=backend, use_cache=False)
        msg = str(exc.value)
        assert isinstance(exc.value, TypeError)
        assert "unknown option(s) ['use_cache'] (did you mean 'cache'?)" in msg
        assert "OrtOptions" in msg and "docs/engines.md" in msg  # where the whole list is
        assert "batch_buckets" not in msg and len(msg) < 300, msg

    def test_a_recipe_passes_the_check_through(self) -> None:
        with pytest.raises(amdinfer.OptionError, match=r"\['use_cache'\] \(did you mean 'cache'\?\)"):
            amdinfer.yolo(yolov8(image_size=32, num_classes=2), imgsz=32, use_cache=False)

    @pytest.mark.parametrize(("typo", "meant"), [("calibratoin", "calibration"), ("precison", "precision")])
    def test_a_recipe_offers_its_own_names_too(self, typo, meant) -> None:
        with pytest.raises(amdinfer.OptionError) as exc:
            amdinfer.yolo(yolov8(image_size=32, num_classes=2), imgsz=32, providers=["cpu"], **{typo: []})
        assert str(exc.value).startswith(f"backend 'ort': unknown option(s) [{typo!r}] (did you mean {meant!r}?)")

    def test_far_from_any_name_gives_no_guess_and_no_list(self) -> None:
        with pytest.raises(amdinfer.OptionError) as exc:
            amdinfer.load(tiny_cnn(), backend="ort", xyzzy=1)
        assert "did you mean" not in str(exc.value) and len(str(exc.value)) < 250

    def test_cache_false_loads(self) -> None:
        with amdinfer.load(tiny_cnn(), providers=["cpu"], cache=False) as engine:
            assert not engine.info.cache_hit


class TestInt8WithoutCalibration:
    """``precision="int8"`` with no data: the cause (no calibration) and the fix, not a backend's name."""

    def test_recipe_names_calibration(self) -> None:
        with pytest.raises(amdinfer.OptionError) as exc:
            amdinfer.yolo(yolov8(image_size=32, num_classes=2), imgsz=32, precision="int8")
        msg = str(exc.value)
        assert msg.startswith("calibration: none given with precision='int8'")
        assert "calibration=[" in msg and "MIGraphX" not in msg

    @pytest.mark.parametrize("kw", [{}, {"providers": ["cpu"]}, {"backend": "reference"}])
    def test_load_names_the_quantizer(self, kw) -> None:
        with pytest.raises(amdinfer.OptionError) as exc:
            amdinfer.load(tiny_cnn(), precision="int8", **kw)
        msg = str(exc.value)
        assert msg.startswith("precision='int8': no calibration data was given")
        assert "quantizer=Int8Quantizer(calibration=" in msg and "MIGraphX" not in msg
