"""Quiet, honest output from the library (issue 22, sections 2 and 5): what it writes, prints and says.

* ``Int8Quantizer`` caches only when asked (``docs/cache.md``): nothing lands in the user's cache folder by
  default, and what it stores is listed with backend, precision and kind.
* Progress bars only on a terminal's stderr (an explicit ``progress=`` still wins); mixed-precision search
  counts layers, not samples.
* ``precision="fp16"`` on ONNX Runtime's CPU provider says it brings no speed (notes, and once on stderr), and
  with the cache on the fp16 conversion is stored, not redone at every load.
* A rewritten model keeps its file name in the engine's repr.
* Without ONNX Runtime, ``backend="auto"`` says that the reference backend is left out on purpose and how to go
  on; ``doctor`` says the same of it.

The truths: files on disk, the bytes written to stderr, call counts of the converter, and outputs of engines
built without the cache.
"""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest

import amdinfer
from amdinfer.cache import CompiledModelCache, default_cache_dir, list_entries
from amdinfer.engines.ort import _session as ort_session
from amdinfer.quantize import AutoMixedPrecision, Fp16Quantizer, Int8Quantizer
from amdinfer.testing.models import random_inputs, tiny_cnn

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.usefixtures("quiet_root_logger")]


@pytest.fixture(scope="module")
def cnn() -> onnx.ModelProto:
    return tiny_cnn(seed=5)


@pytest.fixture(scope="module")
def calib(cnn) -> list[dict[str, np.ndarray]]:
    return [random_inputs(cnn, batch=2, seed=s) for s in range(4)]


@pytest.fixture
def no_cache_env(tmp_path: Path, monkeypatch) -> Path:
    """No ``$AMDINFER_CACHE_DIR``; the user cache folder (XDG, HOME) inside ``tmp_path``; returns that folder."""
    monkeypatch.delenv("AMDINFER_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    default = default_cache_dir()
    assert tmp_path in default.parents, default  # the test can only see what it redirected
    return default


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


# ------------------------------------------------------------------------------ int8 calibration cache
class TestInt8CacheIsOptIn:
    def test_default_writes_nothing(self, cnn, calib, no_cache_env, tmp_path) -> None:
        qmodel = Int8Quantizer(calibration=calib, progress=False).quantize(cnn)
        assert "QuantizeLinear" in {n.op_type for n in qmodel.graph.node}
        assert files_under(tmp_path / "xdg") == [] and files_under(tmp_path / "home") == []
        assert not no_cache_env.exists()

    def test_the_environment_turns_it_on(self, cnn, calib, no_cache_env, tmp_path, monkeypatch) -> None:
        monkeypatch.setenv("AMDINFER_CACHE_DIR", str(tmp_path / "env-cache"))
        Int8Quantizer(calibration=calib, progress=False).quantize(cnn)
        (entry,) = list_entries(tmp_path / "env-cache")
        assert entry.kind == "int8 quantized model"
        assert not no_cache_env.exists()

    def test_a_folder_is_used_and_listed_with_labels(self, cnn, calib, no_cache_env, tmp_path) -> None:
        folder = tmp_path / "mine"
        first = Int8Quantizer(calibration=calib, progress=False, cache=folder).quantize(cnn)
        (entry,) = list_entries(folder)
        assert (entry.backend, entry.precision, entry.kind) == ("ort", "int8", "int8 quantized model")
        assert entry.problem is None
        listed = entry.to_dict()
        assert (listed["backend"], listed["precision"], listed["kind"]) == ("ort", "int8", "int8 quantized model")
        # The stored model is the one quantization made (a second quantizer reads it back).
        again = Int8Quantizer(calibration=calib, progress=False, cache=folder).quantize(cnn)
        assert again.SerializeToString() == first.SerializeToString()
        assert not no_cache_env.exists()

    def test_true_means_the_default_folder(self, cnn, calib, no_cache_env) -> None:
        Int8Quantizer(calibration=calib, progress=False, cache=True).quantize(cnn)
        (entry,) = list_entries(no_cache_env)
        assert entry.precision == "int8"


# ------------------------------------------------------------------------------ progress bars
class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class TestProgressOnlyOnTerminals:
    def test_piped_stderr_gets_no_bar(self, cnn, calib, capsys) -> None:
        pytest.importorskip("tqdm")
        q = Int8Quantizer(calibration=[c["input"][0] for c in calib], preprocess=[np.asarray], cache=False)
        q.quantize(cnn)
        amp = AutoMixedPrecision(q, [calib[0]], tolerance=0.0, candidates=["fc"])
        amp.search(cnn)
        err = capsys.readouterr().err
        assert "amdinfer:" not in err and "it/s" not in err and "%|" not in err, err

    def test_a_terminal_gets_bars(self, cnn, calib, monkeypatch) -> None:
        pytest.importorskip("tqdm")
        term = _Terminal()
        monkeypatch.setattr(sys, "stderr", term)
        Int8Quantizer(calibration=calib, cache=False).quantize(cnn)
        assert "calibrating int8" in term.getvalue()

    def test_explicit_false_wins_on_a_terminal(self, cnn, calib, monkeypatch) -> None:
        term = _Terminal()
        monkeypatch.setattr(sys, "stderr", term)
        Int8Quantizer(calibration=calib, cache=False, progress=False).quantize(cnn)
        assert term.getvalue() == ""

    def test_explicit_true_wins_in_a_pipe_and_amp_counts_layers(self, cnn, calib, capsys) -> None:
        pytest.importorskip("tqdm")
        base = Int8Quantizer(calibration=calib, cache=False, progress=False)
        AutoMixedPrecision(base, [calib[0]], tolerance=0.0, progress=True).search(cnn)
        err = capsys.readouterr().err
        assert "layer sensitivity" in err and "layer/s" in err, err
        assert "sample/s" not in err

    def test_progress_must_be_a_bool_or_none(self, calib) -> None:
        with pytest.raises(amdinfer.OptionError, match="progress: got 'yes'"):
            Int8Quantizer(calibration=calib, progress="yes")
        with pytest.raises(amdinfer.OptionError, match="progress: got 1"):
            AutoMixedPrecision(Int8Quantizer(calibration=calib), [calib[0]], tolerance=0.0, progress=1)


# ------------------------------------------------------------------------------ fp16 on a CPU provider
class TestFp16OnCpu:
    def test_notes_and_one_warning_per_process(self, cnn, monkeypatch, caplog) -> None:
        monkeypatch.setattr(ort_session, "_fp16_on_cpu_said", False)
        with caplog.at_level(logging.WARNING, logger="amdinfer.ort"):
            engines = [amdinfer.load(cnn, precision="fp16", providers=["cpu"], cache=False) for _ in range(2)]
        for engine in engines:
            assert engine.info.precision == "fp16"
            assert any("brings no speed-up" in n and "at every load" in n for n in engine.info.notes)
            engine.close()
        said = [r for r in caplog.records if "brings no speed-up" in r.getMessage()]
        assert len(said) == 1 and said[0].levelno == logging.WARNING

    def test_fp32_says_nothing(self, cnn) -> None:
        with amdinfer.load(cnn, providers=["cpu"], cache=False) as engine:
            assert not any("speed-up" in n for n in engine.info.notes)

    def test_stderr_once_without_logging_configured(self, cnn, tmp_path) -> None:
        path = tmp_path / "cnn.onnx"
        onnx.save_model(cnn, path)
        code = textwrap.dedent(
            f"""
            import amdinfer
            for _ in range(3):
                amdinfer.load({str(path)!r}, precision="fp16", providers=["cpu"], cache=False).close()
            """
        )
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr.count("brings no speed-up") == 1, proc.stderr
        assert proc.stdout == ""

    def test_cli_says_it_once_and_quiet_silences_it(self, cnn, tmp_path) -> None:
        path = tmp_path / "cnn.onnx"
        onnx.save_model(cnn, path)
        base = [sys.executable, "-m", "amdinfer", "run", str(path), "--precision", "fp16", "--providers", "cpu"]
        loud = subprocess.run([*base, "--no-cache"], capture_output=True, text=True, timeout=300)
        quiet = subprocess.run([*base, "--no-cache", "-q", "--json"], capture_output=True, text=True, timeout=300)
        assert loud.returncode == quiet.returncode == 0, loud.stderr + quiet.stderr
        assert loud.stderr.count("brings no speed-up") == 1, loud.stderr
        assert quiet.stderr == "", quiet.stderr
        # -q takes it off stderr; the JSON document still carries it.
        assert any("brings no speed-up" in n for n in json.loads(quiet.stdout)["notes"]), quiet.stdout

    def test_cache_keeps_the_conversion(self, cnn, tmp_path, monkeypatch) -> None:
        x = random_inputs(cnn, batch=2, seed=9)["input"]
        with amdinfer.load(cnn, precision="fp16", providers=["cpu"], cache=False) as plain:
            want = plain.run(x)["logits"]
            assert "rewrite_cache" not in plain.info.settings
        calls = []
        convert = Fp16Quantizer._quantize_prepared
        monkeypatch.setattr(Fp16Quantizer, "_quantize_prepared", lambda self, m: (calls.append(1), convert(self, m))[1])
        for hit in (False, True):
            with amdinfer.load(cnn, precision="fp16", providers=["cpu"], cache_dir=tmp_path) as engine:
                assert engine.info.settings["rewrite_cache"]["hit"] is hit
                assert engine.info.cache_hit is hit  # the ORT-optimized model of the converted model
                assert any("kept in the compiled-model cache" in n for n in engine.info.notes)
                np.testing.assert_array_equal(engine.run(x)["logits"], want)
        assert len(calls) == 1  # converted once, read back the second time
        kinds = sorted((e.kind, e.precision, e.backend) for e in list_entries(tmp_path))
        assert kinds == [("fp16 model", "fp16", "ort"), ("ort optimized model", "fp16", "ort")]
        # Other converter options are another entry.
        with amdinfer.load(cnn, providers=["cpu"], cache_dir=tmp_path, quantizer=Fp16Quantizer(keep_last_n=1)) as e:
            assert e.info.settings["rewrite_cache"]["hit"] is False
        assert len(calls) == 2

    def test_a_damaged_stored_conversion_is_rebuilt(self, cnn, tmp_path, caplog) -> None:
        with amdinfer.load(cnn, precision="fp16", providers=["cpu"], cache_dir=tmp_path) as engine:
            key = engine.info.settings["rewrite_cache"]["key"]
        cache = CompiledModelCache(tmp_path)
        parts = cache.manifest(key)["parts"]
        cache.put(key, lambda tmp: tmp.write_bytes(b"not an onnx model"), parts=parts, suffix=".onnx")
        with caplog.at_level(logging.WARNING, logger="amdinfer.cache"):
            with amdinfer.load(cnn, precision="fp16", providers=["cpu"], cache_dir=tmp_path) as engine:
                assert engine.info.settings["rewrite_cache"]["hit"] is False
        assert "could not load it" in caplog.text


# ------------------------------------------------------------------------------ names survive rewrites
class TestNameSurvivesRewrites:
    @pytest.fixture
    def path(self, cnn, tmp_path) -> Path:
        p = tmp_path / "resnet_like.onnx"
        onnx.save_model(cnn, p)
        return p

    def test_fp16(self, path) -> None:
        with amdinfer.load(path, precision="fp16", providers=["cpu"], cache=False) as engine:
            assert repr(engine) == "<OrtEngine resnet_like.onnx on cpu, fp16>"
            assert engine.model.name == "resnet_like.onnx" and engine.model.path is None

    def test_int8_quantizer(self, path, calib) -> None:
        q = Int8Quantizer(calibration=calib, progress=False, cache=False)
        with amdinfer.load(path, providers=["cpu"], quantizer=q) as engine:
            assert repr(engine) == "<OrtEngine resnet_like.onnx on cpu, int8>"

    def test_reference_engine_rewrite(self, path) -> None:
        with amdinfer.load(path, backend="reference", quantizer=Fp16Quantizer()) as engine:
            assert repr(engine) == "<ReferenceEngine resnet_like.onnx on cpu, fp16>"


# ------------------------------------------------------------------------------ a core install (no ORT)
_NO_RUNTIMES = """
import sys
sys.modules["onnxruntime"] = None  # what a core install (numpy + onnx) looks like to the import system
sys.modules["migraphx"] = None
"""


class TestCoreInstallWithoutOnnxRuntime:
    def test_auto_says_why_and_how_to_go_on(self, cnn, tmp_path) -> None:
        path = tmp_path / "m.onnx"
        onnx.save_model(cnn, path)
        code = _NO_RUNTIMES + textwrap.dedent(
            f"""
            import numpy as np, amdinfer
            try:
                amdinfer.load({str(path)!r})
            except amdinfer.BackendUnavailableError as exc:
                print("ERROR", exc)
            engine = amdinfer.load({str(path)!r}, backend="reference")
            print("REFERENCE", engine.info.backend, engine.run(np.zeros((1, 3, 32, 32), np.float32))["logits"].shape)
            from amdinfer.doctor import diagnose
            print("DOCTOR", diagnose().backends["reference"])
            """
        )
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, proc.stderr
        out = proc.stdout
        error = out.split("ERROR", 1)[1].split("REFERENCE", 1)[0]
        assert "no backend could run this model" in error
        assert "onnxruntime is not installed" in error
        assert "pip install 'amdinfer-onnx[cpu]'" in error and "pip install '.[cpu]'" in error
        assert "not part of backend='auto'" in error and "pass backend='reference'" in error
        assert "REFERENCE reference (1, 10)" in out
        assert "DOCTOR ready; not part of backend='auto' (pass backend='reference')" in out

    def test_doctor_line_here(self) -> None:
        from amdinfer.doctor import diagnose

        assert diagnose().backends["reference"] == "ready; not part of backend='auto' (pass backend='reference')"
