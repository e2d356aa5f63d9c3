"""The native MIGraphX engine.

Two kinds of tests live here:

* Glue tests that need no ``migraphx``: import diagnosis, the operator check against the operator list
  recorded from AMDMIGraphX's source (``tests/data/migraphx_onnx_operators.txt``), the ``shapes=`` ->
  ``parse_onnx`` mapping, output-name recovery, argument/array conversion, int8 calibration re-batching,
  option validation. Truths are hand-computed values and facts read from MIGraphX's source.
* Engine tests against the real ``migraphx`` module (target ``"ref"``), which run only where AMD's module
  imports and skip elsewhere with the import failure in the skip message. Nothing here stands in a fake
  ``migraphx`` for the real one; the one stand-in object (``_RecordingArgument``) only checks the order and
  lifetime handling of the argument glue and verifies nothing about MIGraphX.
"""

from __future__ import annotations

import gc
import importlib
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import amdinfer
from amdinfer import verify
from amdinfer.engines import _migraphx_support as glue
from amdinfer.engines.migraphx import MigraphxEngine, probe
from amdinfer.model import ModelSource
from amdinfer.testing import models
from amdinfer.types import ShapeBounds, TensorSpec

DATA = Path(__file__).parents[1] / "data"
F32 = np.dtype("float32")

MIGRAPHX_PROBLEM = probe()
needs_migraphx = pytest.mark.skipif(MIGRAPHX_PROBLEM is not None, reason=f"migraphx not importable: {MIGRAPHX_PROBLEM}")


def recorded_operators() -> list[str]:
    lines = (DATA / "migraphx_onnx_operators.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def one_node_model(op_type: str, domain: str = "", opset: int = 17) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])
    node = helper.make_node(op_type, ["x"], ["y"], domain=domain)
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=opsets)


def reference_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """onnx's ReferenceEvaluator: the independent truth for the real-MIGraphX tests."""
    from onnx.reference import ReferenceEvaluator

    return dict(zip([o.name for o in model.graph.output], ReferenceEvaluator(model).run(None, feeds)))


def mixed_outputs_model() -> onnx.ModelProto:
    """Three outputs of three dtypes, declared in an order that is not the order the nodes compute them."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5])
    outputs = [
        helper.make_tensor_value_info("am", TensorProto.INT64, ["N"]),
        helper.make_tensor_value_info("cnt", TensorProto.INT32, ["N", 5]),
        helper.make_tensor_value_info("sm", TensorProto.FLOAT, ["N", 5]),
    ]
    nodes = [
        helper.make_node("Softmax", ["x"], ["sm"], axis=1),
        helper.make_node("ArgMax", ["sm"], ["am"], axis=1, keepdims=0),
        helper.make_node("Cast", ["x"], ["cnt"], to=TensorProto.INT32),
    ]
    graph = helper.make_graph(nodes, "mixed", [x], outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# ---------------------------------------------------------------------------------------------- importing
class TestImportDiagnosis:
    def test_placeholder_distribution(self) -> None:
        msg = glue.diagnose_import_failure(
            "No module named 'migraphx'",
            dist_version="0.0.1",
            dist_has_module=False,
            rocm_modules=[],
            python_tag="cpython-311",
        )
        assert "'migraphx' 0.0.1 is an empty placeholder" in msg
        assert "pip uninstall migraphx" in msg and "PYTHONPATH=/opt/rocm/lib" in msg

    def test_installed_but_not_on_path(self) -> None:
        found = ["/opt/rocm/lib/migraphx.cpython-311-x86_64-linux-gnu.so"]
        msg = glue.diagnose_import_failure(
            "No module named 'migraphx'",
            dist_version=None,
            dist_has_module=False,
            rocm_modules=found,
            python_tag="cpython-311",
        )
        assert "export PYTHONPATH=/opt/rocm/lib:$PYTHONPATH" in msg and found[0] in msg

    def test_built_for_another_python(self) -> None:
        found = ["/opt/rocm/lib/migraphx.cpython-310-x86_64-linux-gnu.so"]
        msg = glue.diagnose_import_failure(
            "No module named 'migraphx'",
            dist_version=None,
            dist_has_module=False,
            rocm_modules=found,
            python_tag="cpython-312",
        )
        assert "['cpython-310']" in msg and "this interpreter is cpython-312" in msg

    def test_runtime_library_missing(self) -> None:
        err = "libmigraphx_c.so.3: cannot open shared object file: No such file or directory"
        msg = glue.diagnose_import_failure(
            err, dist_version=None, dist_has_module=False, rocm_modules=[], python_tag="cpython-311"
        )
        assert "libmigraphx_c.so.3 cannot be loaded" in msg and "LD_LIBRARY_PATH=/opt/rocm/lib" in msg

    def test_module_without_api(self) -> None:
        msg = glue.diagnose_import_failure(
            "module at x has no parse_onnx/get_target",
            dist_version=None,
            dist_has_module=False,
            rocm_modules=[],
            python_tag="cpython-311",
            imported_without_api=True,
        )
        assert "without MIGraphX's API" in msg

    def test_the_real_placeholder_layout_is_detected(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        # The PyPI wheel migraphx-0.0.1-py3-none-any.whl holds exactly these four dist-info files and no module.
        info = tmp_path / "migraphx-0.0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            "Metadata-Version: 2.4\nName: migraphx\nVersion: 0.0.1\nSummary: Placeholder reserving the AMD "
            "MIGraphX Python package name; official releases forthcoming\n"
        )
        (info / "WHEEL").write_text("Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        (info / "top_level.txt").write_text("\n")
        (info / "RECORD").write_text(
            "migraphx-0.0.1.dist-info/METADATA,,\nmigraphx-0.0.1.dist-info/WHEEL,,\n"
            "migraphx-0.0.1.dist-info/top_level.txt,,\nmigraphx-0.0.1.dist-info/RECORD,,\n"
        )
        if MIGRAPHX_PROBLEM is None:
            pytest.skip("the real migraphx imports here; the placeholder cannot shadow it")
        monkeypatch.syspath_prepend(str(tmp_path))
        importlib.invalidate_caches()
        with pytest.raises(amdinfer.BackendUnavailableError, match=r"0\.0\.1 is an empty placeholder") as err:
            glue.import_migraphx()
        assert err.value.backend == "migraphx"

    def test_engine_reports_missing_migraphx(self) -> None:
        if MIGRAPHX_PROBLEM is None:
            pytest.skip("migraphx imports here")
        with pytest.raises(amdinfer.BackendUnavailableError, match="backend 'migraphx'"):
            amdinfer.load(models.tiny_cnn(), backend="migraphx", target="ref")

    def test_auto_passes_over_it_with_the_reason(self) -> None:
        if MIGRAPHX_PROBLEM is None:
            pytest.skip("migraphx imports here")
        with amdinfer.load(models.tiny_cnn(), providers=None) as engine:
            assert engine.info.backend == "ort"
            assert "migraphx" in engine.info.skipped["migraphx"]

    def test_import_amdinfer_does_not_import_migraphx(self) -> None:
        code = "import amdinfer, amdinfer.engines.migraphx, sys; print('migraphx' in sys.modules)"
        import subprocess

        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert out.strip() == "False"


# ---------------------------------------------------------------------------------------------- operators
class TestOperatorCheck:
    def test_recorded_list_is_the_parser_list(self) -> None:
        ops = recorded_operators()
        assert len(ops) == len(set(ops)) > 150
        # Spot checks against AMDMIGraphX src/onnx/parse_*.cpp.
        for op in ("Conv", "MatMul", "NonMaxSuppression", "Resize", "QLinearConv", "SkipLayerNormalization"):
            assert op in ops
        for op in ("Det", "BitShift", "StringNormalizer", "Col2Im"):
            assert op not in ops

    @pytest.mark.parametrize("builder", ["tiny_cnn", "resnet50", "yolov8", "yolov5", "transformer_encoder"])
    def test_test_models_are_supported(self, builder: str) -> None:
        kwargs = {"image_size": 64} if builder in ("resnet50", "yolov8", "yolov5") else {}
        ops = ModelSource.from_any(getattr(models, builder)(**kwargs)).operators()
        assert glue.unsupported_operators(ops, recorded_operators()) == []

    def test_unsupported_ops_are_named(self) -> None:
        ops = ModelSource.from_any(one_node_model("Det")).operators() | {"Conv", "BitShift"}
        with pytest.raises(amdinfer.UnsupportedOperatorError, match=r"no ONNX parser for \['BitShift', 'Det'\]") as e:
            glue.check_operators(ops, recorded_operators(), model_name="m.onnx", version="2.13")
        assert e.value.operators == ["BitShift", "Det"]
        assert isinstance(e.value, amdinfer.ModelError)

    def test_contrib_domain_is_looked_up_by_type(self) -> None:
        ops = {"com.microsoft::FastGelu", "com.microsoft::SkipLayerNormalization"}
        assert glue.unsupported_operators(ops, recorded_operators()) == []

    def test_custom_domain_is_reported_even_with_a_standard_name(self) -> None:
        ops = ModelSource.from_any(one_node_model("Relu", domain="my.custom"), check=False).operators()
        with pytest.raises(amdinfer.UnsupportedOperatorError, match="MIGraphX ignores the domain"):
            glue.check_operators(ops, recorded_operators(), model_name="m", version="x")

    def test_parser_error_names_the_operator(self) -> None:
        assert glue.unknown_operator_in("onnx_parser.cpp:625: parse_graph: Unknown operator: BitShift") == "BitShift"
        assert glue.unknown_operator_in("PARSE_CONV: bad padding") is None


# ---------------------------------------------------------------------------------------------- shapes
class TestShapeMapping:
    x = TensorSpec("x", F32, ("N", 3, "H", "W"))
    m = TensorSpec("mask", F32, ("N", 8))
    fixed = TensorSpec("scale", F32, (1,))

    def test_all_static_bounds_use_map_input_dims(self) -> None:
        b = {"x": ShapeBounds((2, 3, 8, 8), (2, 3, 8, 8)), "mask": ShapeBounds((2, 8), (2, 8))}
        assert glue.dynamic_input_dims([self.x, self.m], b) == {"map_input_dims": {"x": [2, 3, 8, 8], "mask": [2, 8]}}

    def test_dynamic_bounds_use_map_dyn_input_dims_per_axis(self) -> None:
        b = {"x": ShapeBounds((1, 3, 32, 32), (8, 3, 64, 64), (4, 3, 64, 48))}
        out = glue.dynamic_input_dims([self.x], b)
        assert out == {"map_dyn_input_dims": {"x": [(1, 8, (4,)), (3, 3, ()), (32, 64, (64,)), (32, 64, (48,))]}}

    def test_no_optimum_gives_no_optimals(self) -> None:
        out = glue.dynamic_input_dims([self.m], {"mask": ShapeBounds((1, 8), (16, 8))})
        assert out == {"map_dyn_input_dims": {"mask": [(1, 16, ()), (8, 8, ())]}}

    def test_static_inputs_join_the_dynamic_map(self) -> None:
        # MIGraphX throws when both maps are non-empty (parse_onnx_from in src/onnx/onnx.cpp).
        b = {"x": ShapeBounds((1, 3, 8, 8), (4, 3, 8, 8)), "mask": ShapeBounds((2, 8), (2, 8))}
        out = glue.dynamic_input_dims([self.x, self.m], b)
        assert set(out) == {"map_dyn_input_dims"}
        assert out["map_dyn_input_dims"]["mask"] == [(2, 2, ()), (8, 8, ())]

    def test_unbounded_dynamic_input_needs_bounds_or_default(self) -> None:
        with pytest.raises(amdinfer.OptionError, match=r"input 'mask' has dynamic dimensions \(N, 8\)"):
            glue.dynamic_input_dims([self.x, self.m], {"x": ShapeBounds((1, 3, 8, 8), (4, 3, 8, 8))})
        out = glue.dynamic_input_dims([self.x, self.m, self.fixed], {}, default_dim_value=1)
        assert out == {"map_input_dims": {}}

    def test_initial_signature(self) -> None:
        b = {"x": ShapeBounds((1, 3, 8, 8), (8, 3, 8, 8), (3, 3, 8, 8))}
        assert glue.initial_signature([self.x], b) == {"x": (3, 3, 8, 8)}
        assert glue.initial_signature([self.x], b, buckets=(1, 2, 4, 8)) == {"x": (4, 3, 8, 8)}
        assert glue.initial_signature([self.x], {"x": ShapeBounds((1, 3, 8, 8), (8, 3, 8, 8))}) == {"x": (8, 3, 8, 8)}
        assert glue.initial_signature([self.fixed], {}) == {"scale": (1,)}
        assert glue.initial_signature([self.m], {}, default_dim_value=2) == {"mask": (2, 8)}
        assert glue.initial_signature([self.x, self.fixed], {}) is None

    def test_signature_and_static_dims(self) -> None:
        assert glue.signature_of({"a": (1, 2), "b": np.zeros((3,)).shape}) == (("a", (1, 2)), ("b", (3,)))
        assert glue.static_input_dims({"a": (np.int64(2), 3)}) == {"map_input_dims": {"a": [2, 3]}}


# ---------------------------------------------------------------------------------------------- outputs
class TestOutputs:
    outs = (
        TensorSpec("boxes", F32, ("N", 4)),
        TensorSpec("scores", F32, ("N",)),
        TensorSpec("n", np.dtype("int64"), ()),
    )

    def test_names_follow_onnx_output_order(self) -> None:
        assert glue.recover_output_names(self.outs, [(5, 4), (5,), ()]) == ["boxes", "scores", "n"]

    def test_dynamic_shapes_are_not_checked(self) -> None:
        assert glue.recover_output_names(self.outs, [None, None, None]) == ["boxes", "scores", "n"]

    def test_count_mismatch(self) -> None:
        with pytest.raises(amdinfer.ModelError, match="returns 2 outputs, expected the model's 3"):
            glue.recover_output_names(self.outs, [(5, 4), (5,)])

    def test_shape_mismatch_refuses_to_guess(self) -> None:
        with pytest.raises(amdinfer.ModelError, match="output 0 has shape \\(5,\\), expected ONNX output 'boxes'"):
            glue.recover_output_names(self.outs, [(5,), (5, 4), ()])

    def test_output_parameter_index(self) -> None:
        # param_name() in AMDMIGraphX src/param_utils.cpp: prefix + i below 10, prefix + ":" + 5 digits after.
        assert glue.output_parameter_index("main:#output_0") == 0
        assert glue.output_parameter_index("main:#output_9") == 9
        assert glue.output_parameter_index("main:#output_:00010") == 10
        assert glue.output_parameter_index("main:#output_:00123") == 123
        assert glue.output_parameter_index("input") is None
        assert glue.output_parameter_index("main:#output") is None

    def test_to_numpy_copies(self) -> None:
        src = np.arange(12, dtype=np.float32).reshape(3, 4)
        out = glue.to_numpy(memoryview(src))
        src[:] = -1  # MIGraphX may reuse its buffer on the next run
        np.testing.assert_array_equal(out, np.arange(12, dtype=np.float32).reshape(3, 4))

    def test_to_numpy_follows_strides(self) -> None:
        src = np.arange(12, dtype=np.float32).reshape(3, 4).T  # a transposed (non-standard) buffer
        out = glue.to_numpy(memoryview(src))
        assert out.flags.c_contiguous
        np.testing.assert_array_equal(out, src)

    def test_to_numpy_casts_to_the_declared_type(self) -> None:
        half = np.array([1.5, -2.25], np.float16)
        out = glue.to_numpy(memoryview(half), np.dtype("float32"))
        assert out.dtype == np.float32 and out.tolist() == [1.5, -2.25]


class _RecordingArgument:
    """Stand-in for ``migraphx.argument`` used ONLY to check the glue's ordering and lifetime handling.

    Like the real one it keeps a raw address, not a reference. It verifies nothing about MIGraphX.
    """

    def __init__(self, buf: np.ndarray) -> None:
        self.address = buf.__array_interface__["data"][0]
        self.shape = buf.shape


class TestArgumentGlue:
    def test_only_program_parameters_are_passed_and_arrays_are_kept(self) -> None:
        base = np.arange(16, dtype=np.float32).reshape(4, 4)
        feeds = {"a": base[:, ::2], "b": np.ones((2, 2), np.float32), "unused": np.zeros(1, np.float32)}
        args, keep = glue.make_arguments(feeds, _RecordingArgument, ["a", "b"])
        assert list(args) == ["a", "b"]
        # the strided view was copied to a contiguous array, and that copy is what the address points at
        kept = {a.__array_interface__["data"][0]: a for a in keep}
        assert set(kept) == {args["a"].address, args["b"].address}
        gc.collect()
        np.testing.assert_array_equal(kept[args["a"].address], base[:, ::2])
        assert all(a.flags.c_contiguous for a in keep)


# ---------------------------------------------------------------------------------------------- quantization / options
class TestCalibrationAndOptions:
    def test_calibration_is_rebatched_to_the_program_batch(self) -> None:
        cal = [{"x": np.full((1, 2), v, np.float32), "m": np.full((1, 3), 10 * v, np.float32)} for v in range(5)]
        out = glue.calibration_for(cal, {"x": (2, 2), "m": (2, 3)})
        assert [b["x"].shape for b in out] == [(2, 2)] * 3
        assert [b["x"][:, 0].tolist() for b in out] == [[0, 1], [2, 3], [4, 4]]
        assert out[2]["m"][:, 0].tolist() == [40, 40]
        # value ranges (what MIGraphX's calibration measures) are unchanged
        assert max(float(np.abs(b["x"]).max()) for b in out) == 4.0

    def test_calibration_kept_for_dynamic_programs(self) -> None:
        cal = [{"x": np.ones((3, 2), np.float32)}]
        assert glue.calibration_for(cal, None)[0]["x"].shape == (3, 2)

    def test_calibration_errors(self) -> None:
        with pytest.raises(amdinfer.OptionError, match="no input 'm'"):
            glue.calibration_for([{"x": np.ones((1, 2))}], {"x": (1, 2), "m": (1, 3)})
        with pytest.raises(amdinfer.OptionError, match=r"got shape \(1, 5\), expected \(N, 2\)"):
            glue.calibration_for([{"x": np.ones((1, 5))}], {"x": (1, 2)})

    def test_compile_kwargs_leave_defaults_out(self) -> None:
        assert glue.compile_kwargs(offload_copy=True, fast_math=True, exhaustive_tune=False) == {}
        assert glue.compile_kwargs(offload_copy=True, fast_math=False, exhaustive_tune=False) == {"fast_math": False}

    def test_environment_and_errors(self) -> None:
        env = {"MIGRAPHX_DISABLE_MLIR": "1", "MIGRAPHX_GPU_COMPILE_PARALLEL": "4", "PATH": "/bin"}
        assert list(glue.migraphx_environment(env)) == ["MIGRAPHX_DISABLE_MLIR", "MIGRAPHX_GPU_COMPILE_PARALLEL"]
        assert glue.looks_like_device_error("Requested target 'gpu' is not loaded or not supported")
        assert not glue.looks_like_device_error("Unknown operator: Det")

    @pytest.mark.parametrize(
        ("options", "match"),
        [
            ({"target": "tpu"}, r"target: got 'tpu', expected one of \['gpu', 'ref', 'cpu'\]"),
            ({"dynamic_shapes": "maybe"}, "dynamic_shapes: got 'maybe'"),
            ({"cache_dir": "/tmp/x", "cache": False}, "cache_dir: given together with cache=False"),
            ({"default_dim_value": 0}, "default_dim_value: got 0"),
            ({"fast_math": "yes"}, "fast_math: got 'yes'"),
            ({"precision": "fp64"}, "MIGraphX computes in fp32 at most"),
            ({"precision": "int8"}, "needs calibration data"),
            ({"target": "ref", "offload_copy": False}, "only meaningful for target='gpu'"),
        ],
    )
    def test_options_are_checked_before_migraphx_is_needed(self, options: dict, match: str) -> None:
        with pytest.raises(amdinfer.OptionError, match=match):
            MigraphxEngine(models.tiny_cnn(), **options)

    def test_hip_runtime_absent_without_rocm(self) -> None:
        hip = glue.HipRuntime.find(loaded_maps="")
        if hip is not None:
            pytest.skip(f"a HIP runtime is installed here ({hip.path})")
        assert hip is None


# ---------------------------------------------------------------------------------------------- real migraphx
@needs_migraphx
class TestWithRealMigraphx:
    """Run where AMD's migraphx imports (target 'ref' needs no GPU); skipped elsewhere with the reason.

    First run against a CPU-only build of ROCm/AMDMIGraphX f729a52 (2.16.0.dev, GPU target off; see
    docs/migraphx.md). MIGraphX's ref convolution is a naive loop (~1 us per multiply-add), so these tests use
    16x16 images; truths are onnx's ReferenceEvaluator on the same model.
    """

    def test_outputs_match_onnx_reference(self, tmp_path: Path) -> None:
        model = models.tiny_cnn(image_size=16)
        feeds = models.random_inputs(model, batch=2, seed=1)
        want = reference_outputs(model, feeds)
        with amdinfer.load(model, backend="migraphx", target="ref", cache_dir=tmp_path) as engine:
            got = engine.run(feeds)
            assert list(got) == ["logits"] and engine.info.target == "ref"
        assert verify.compare(got, want, rms_tol=1e-3).passed

    def test_second_start_hits_the_cache(self, tmp_path: Path) -> None:
        model = models.tiny_cnn(image_size=16)
        x = models.random_inputs(model, batch=1)["input"]
        with amdinfer.load(model, backend="migraphx", target="ref", cache_dir=tmp_path) as first:
            a = first.run(x)["logits"]
            assert first.info.cache_hit is False
        with amdinfer.load(model, backend="migraphx", target="ref", cache_dir=tmp_path) as second:
            b = second.run(x)["logits"]
            assert second.info.cache_hit is True
        np.testing.assert_array_equal(a, b)

    def test_corrupt_program_is_rebuilt(self, tmp_path: Path) -> None:
        model = models.tiny_cnn(image_size=16)
        x = models.random_inputs(model, batch=1)["input"]
        with amdinfer.load(model, backend="migraphx", target="ref", cache_dir=tmp_path) as first:
            a = first.run(x)["logits"]
        (artefact,) = [e.path for e in amdinfer.cache.list_entries(tmp_path)]
        artefact.write_bytes(artefact.read_bytes()[: artefact.stat().st_size // 2])
        with amdinfer.load(model, backend="migraphx", target="ref", cache_dir=tmp_path) as again:
            assert again.info.cache_hit is False
            np.testing.assert_array_equal(again.run(x)["logits"], a)

    def test_buckets_compile_once_per_bucket(self) -> None:
        model = models.tiny_cnn(image_size=16)
        x = models.random_inputs(model, batch=8, seed=2)["input"]
        want = reference_outputs(model, {"input": x})["logits"]
        with amdinfer.load(model, backend="migraphx", target="ref", batch_buckets=[2, 4, 8], cache=False) as eng:
            for n in (1, 2, 3, 5, 8):
                np.testing.assert_allclose(eng.run(x[:n])["logits"], want[:n], rtol=1e-4, atol=1e-5)
            assert eng.programs == 3

    def test_dynamic_program(self) -> None:
        model = models.tiny_cnn(image_size=16)
        x = models.random_inputs(model, batch=3, seed=4)["input"]
        want = reference_outputs(model, {"input": x})["logits"]
        shapes = {"input": [(1, 3, 16, 16), (4, 3, 16, 16), (2, 3, 16, 16)]}
        with amdinfer.load(
            model, backend="migraphx", target="ref", shapes=shapes, dynamic_shapes="program", cache=False
        ) as eng:
            for n in (1, 3):
                np.testing.assert_allclose(eng.run(x[:n])["logits"], want[:n], rtol=1e-4, atol=1e-5)
            assert eng.programs == 1

    @pytest.mark.parametrize("mode", ["per_shape", "program"])
    def test_outputs_keep_graph_order_and_dtypes(self, mode: str) -> None:
        model = mixed_outputs_model()
        x = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32) * 4
        want = reference_outputs(model, {"x": x})
        shapes = {"x": [(1, 5), (4, 5)]} if mode == "program" else None
        with amdinfer.load(
            model, backend="migraphx", target="ref", shapes=shapes, dynamic_shapes=mode, cache=False
        ) as engine:
            got = engine.run(x)
            assert list(got) == ["am", "cnt", "sm"]
            assert engine.run(x, outputs=["sm"]).keys() == {"sm"}
        for name, value in want.items():
            assert got[name].dtype == value.dtype, name
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6)

    @pytest.mark.parametrize(
        ("precision", "call"),
        [("fp16", "quantize_fp16(ins_names=['all'])"), ("bf16", "quantize_bf16(ins_names=['all'])")],
    )
    def test_reduced_precision(self, precision: str, call: str) -> None:
        model = models.tiny_cnn(image_size=16)
        feeds = models.random_inputs(model, batch=2, seed=1)
        want = reference_outputs(model, feeds)
        with amdinfer.load(model, backend="migraphx", target="ref", precision=precision, cache=False) as engine:
            got = engine.run(feeds)
            assert engine.info.precision == precision and engine.info.settings["quantization"] == "migraphx." + call
        assert got["logits"].dtype == np.float32  # MIGraphX converts back at the outputs
        report = verify.compare(got, want, precision=precision)
        assert report.passed, report
        assert not verify.compare(got, want, rms_tol=1e-7, atol=1e-7, rtol=0.0).passed  # it did change the math

    def test_int8_with_calibration(self) -> None:
        from amdinfer.quantize import Int8Quantizer

        model = models.tiny_cnn(image_size=16)
        cal = [models.random_inputs(model, batch=1, seed=i)["input"] for i in range(3)]
        feeds = models.random_inputs(model, batch=2, seed=7)
        want = reference_outputs(model, feeds)
        q = Int8Quantizer(calibration=cal, progress=False, cache=False)
        with amdinfer.load(model, backend="migraphx", target="ref", quantizer=q, cache=False) as engine:
            got = engine.run(feeds)
            assert engine.info.precision == "int8"
            assert "3 calibration batches" in engine.info.settings["quantization"]
        report = verify.compare(got, want, precision="int8")
        assert report.passed, report
        assert not verify.compare(got, want, precision="fp32").passed  # it did quantize

    def test_int8_dynamic_program_names_the_fix(self) -> None:
        from amdinfer.quantize import Int8Quantizer

        model = models.tiny_cnn(image_size=16)
        cal = [models.random_inputs(model, batch=1, seed=i)["input"] for i in range(2)]
        q = Int8Quantizer(calibration=cal, progress=False, cache=False)
        shapes = {"input": [(1, 3, 16, 16), (2, 3, 16, 16)]}
        # MIGraphX 2.16: quantize_8bits calls lens() on a dynamic shape (an abort with assertions on), so amdinfer
        # refuses before calling it; the per-shape programs it names do quantize.
        with pytest.raises(amdinfer.OptionError, match=r"quantize_int8 cannot quantize a dynamic-shape program"):
            amdinfer.load(model, backend="migraphx", target="ref", quantizer=q, shapes=shapes, dynamic_shapes="program")
        feeds = models.random_inputs(model, batch=2, seed=7)
        with amdinfer.load(
            model, backend="migraphx", target="ref", quantizer=q, shapes=shapes, dynamic_shapes="per_shape"
        ) as engine:
            assert verify.compare(engine.run(feeds), reference_outputs(model, feeds), precision="int8").passed

    def test_dynamic_parse_failure_names_the_fix(self) -> None:
        model = models.yolov8(image_size=32, num_classes=2)
        shapes = {"images": [(1, 3, 32, 32), (2, 3, 32, 32)]}
        try:
            engine = amdinfer.load(
                model, backend="migraphx", target="ref", shapes=shapes, dynamic_shapes="program", cache=False
            )
        except amdinfer.ModelError as exc:  # MIGraphX 2.16: CONCAT: all input dimensions should match in axis 0
            assert "MIGraphX cannot parse it" in str(exc) and "dynamic_shapes='per_shape'" in str(exc)
        else:
            feeds = models.random_inputs(model, batch=1, seed=3)
            with engine:
                assert verify.compare(engine.run(feeds), reference_outputs(model, feeds), rms_tol=1e-3).passed

    def test_missing_cpu_target(self) -> None:
        with pytest.raises(amdinfer.BackendUnavailableError, match="cpu target exists only in MIGraphX builds"):
            amdinfer.load(models.tiny_cnn(image_size=16), backend="migraphx", target="cpu")

    def test_unsupported_operator(self) -> None:
        with pytest.raises(amdinfer.UnsupportedOperatorError, match="Det"):
            amdinfer.load(one_node_model("Det"), backend="migraphx", target="ref")


# ---------------------------------------------------------------------------------------------- engine glue
class _StandInMigraphx:
    """NOT MIGraphX. A stand-in with the keyword signatures of ``src/py/migraphx_py.cpp`` (HEAD f729a52).

    Used ONLY to execute :class:`MigraphxEngine`'s own Python glue on a machine without MIGraphX: that it
    calls parse/quantize/compile/save/load/run with the binding's argument names, names the outputs, keeps
    per-shape programs and goes through the cache. It computes with onnx's ReferenceEvaluator; nothing it
    returns says anything about MIGraphX, and no document calls these tests verification of MIGraphX.
    """

    __version__ = "stand-in"

    def __init__(self) -> None:
        self.calls: list[str] = []
        ops = recorded_operators()
        stand_in = self

        class DynamicDimension:
            def __init__(self, lo: int, hi: int, optimals: set | None = None) -> None:
                if optimals is not None and not isinstance(optimals, set):
                    raise TypeError("optimals must be a set (std::set caster)")
                self.min, self.max, self.optimals = lo, hi, optimals or set()

        class Shape:
            dynamic_dimension = DynamicDimension

            def __init__(self, lens: tuple[int, ...] | None) -> None:
                self._lens = lens

            def lens(self) -> list[int]:
                return list(self._lens or ())

            def dynamic(self) -> bool:
                return self._lens is None

        class Program:
            def __init__(self, model: bytes, dims: dict, compiled: bool = False) -> None:
                self.model, self.dims, self.compiled = model, dims, compiled
                self.offload_copy = True
                proto = onnx.load_model_from_string(model)
                self.inputs = [i.name for i in proto.graph.input]
                self.outputs = [o.name for o in proto.graph.output]

            def _lens(self, name: str) -> tuple[int, ...] | None:
                return tuple(self.dims[name]) if name in self.dims else None

            def get_parameter_shapes(self) -> dict:
                params = {n: Shape(self._lens(n)) for n in self.inputs}
                if self.compiled and not self.offload_copy:  # output buffers become parameters
                    for i, shape in enumerate(self.get_output_shapes()):
                        params[f"main:#output_{i}"] = shape
                return params

            def get_output_shapes(self) -> list:
                if not all(n in self.dims for n in self.inputs):
                    return [Shape(None) for _ in self.outputs]
                from onnx.reference import ReferenceEvaluator

                feeds = {n: np.zeros(self.dims[n], np.float32) for n in self.inputs}
                return [Shape(np.shape(v)) for v in ReferenceEvaluator(self.model).run(None, feeds)]

            def compile(self, t, offload_copy: bool = True, fast_math: bool = True, exhaustive_tune: bool = False):
                stand_in.calls.append(f"compile:{t}:{offload_copy}:{fast_math}:{exhaustive_tune}")
                self.compiled, self.offload_copy = True, offload_copy

            def is_compiled(self) -> bool:
                return self.compiled

            def run(self, params: dict) -> list:
                from onnx.reference import ReferenceEvaluator

                stand_in.calls.append("run")
                if not self.offload_copy:
                    missing = [n for n in self.get_parameter_shapes() if n not in params]
                    if missing:
                        raise RuntimeError(f"missing parameters {missing}")
                    params = {k: v for k, v in params.items() if "#output_" not in k}
                for name, arr in params.items():
                    if name in self.dims and tuple(arr.shape) != tuple(self.dims[name]):
                        raise RuntimeError(f"param {name}: shape {arr.shape} != {self.dims[name]}")
                return list(ReferenceEvaluator(self.model).run(None, {k: np.asarray(v) for k, v in params.items()}))

        self.shape = Shape
        self.Program = Program
        self._ops = ops

    # -- module-level functions, with the binding's parameter names and defaults
    def get_onnx_operators(self) -> list[str]:
        return list(self._ops)

    def get_target(self, name: str) -> str:
        if name not in ("ref", "gpu"):
            raise RuntimeError(f"Requested target '{name}' is not loaded or not supported")
        return name

    def parse_onnx_buffer(
        self,
        filename: bytes,
        default_dim_value: int = 0,
        default_dyn_dim_value=None,
        map_input_dims=None,
        map_dyn_input_dims=None,
        skip_unknown_operators: bool = False,
        print_program_on_error: bool = False,
        external_data_path: str = "",
        use_debug_symbols: bool = False,
    ):
        if map_input_dims and map_dyn_input_dims:
            raise RuntimeError("PARSE_ONNX_FROM: both map_input_dims and map_dyn_input_dims non-empty")
        self.calls.append("parse_onnx_buffer:" + ("dyn" if map_dyn_input_dims else "static"))
        # Like the real parser: mapped dims win; unknown dims become default_dim_value (0 -> {1, 1}).
        dims = {}
        for vi in onnx.load_model_from_string(filename).graph.input:
            if vi.name in (map_dyn_input_dims or {}):
                continue
            model_dims = [
                d.dim_value if d.HasField("dim_value") else (default_dim_value or 1)
                for d in vi.type.tensor_type.shape.dim
            ]
            dims[vi.name] = list((map_input_dims or {}).get(vi.name, model_dims))
        return self.Program(filename, dims)

    def parse_onnx(
        self,
        filename: str,
        default_dim_value: int = 0,
        default_dyn_dim_value=None,
        dim_params=None,
        map_input_dims=None,
        map_dyn_input_dims=None,
        skip_unknown_operators: bool = False,
        print_program_on_error: bool = False,
        max_loop_iterations: int = 10,
        limit_max_iterations: int = 65535,
        use_debug_symbols: bool = False,
    ):
        self.calls.append("parse_onnx")
        return self.parse_onnx_buffer(
            Path(filename).read_bytes(), map_input_dims=map_input_dims, map_dyn_input_dims=map_dyn_input_dims
        )

    def quantize_fp16(self, prog, ins_names=("all",)) -> None:
        self.calls.append(f"quantize_fp16:{list(ins_names)}")

    def quantize_int8(self, prog, t, calibration=(), ins_names=("dot", "convolution")) -> None:
        if not isinstance(ins_names, set):
            raise TypeError("ins_names: std::unordered_set caster takes a set")
        shapes = [{k: tuple(np.asarray(v).shape) for k, v in c.items()} for c in calibration]
        self.calls.append(f"quantize_int8:{t}:{sorted(ins_names)}:{shapes}")

    def to_gpu(self, arg, host: bool = False):
        self.calls.append("to_gpu")
        return arg

    def allocate_gpu(self, s, host: bool = False):
        self.calls.append("allocate_gpu")
        return np.empty(s.lens(), np.float32)

    def from_gpu(self, arg):
        self.calls.append("from_gpu")
        return arg

    def argument(self, buf) -> np.ndarray:
        return np.asarray(buf)

    def save(self, p, filename: str, format: str = "msgpack") -> None:
        import pickle

        self.calls.append(f"save:{format}")
        Path(filename).write_bytes(pickle.dumps((p.model, p.dims, p.compiled)))

    def load(self, filename: str, format: str = "msgpack"):
        import pickle

        self.calls.append(f"load:{format}")
        model, dims, compiled = pickle.loads(Path(filename).read_bytes())
        return self.Program(model, dims, compiled)


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> _StandInMigraphx:
    if MIGRAPHX_PROBLEM is None:
        pytest.skip("the real migraphx imports here; the real-migraphx tests cover the engine")
    fake = _StandInMigraphx()
    monkeypatch.setattr(importlib, "import_module", lambda name: fake if name == "migraphx" else None)
    return fake


class TestEngineGlueWithStandIn:
    """Executes MigraphxEngine's Python glue against the labelled stand-in above (not MIGraphX)."""

    def test_static_model_compiles_at_load_and_names_outputs(self, stand_in, tmp_path: Path) -> None:
        model = models.tiny_cnn()
        x = models.random_inputs(model, batch=2, seed=3)["input"]
        with amdinfer.load(model, backend="migraphx", target="ref", shapes={"input": x.shape}, cache_dir=tmp_path) as e:
            assert stand_in.calls[:3] == ["parse_onnx_buffer:static", "compile:ref:True:True:False", "save:msgpack"]
            got = e.run(x)
        with amdinfer.load(model, backend="ort", providers=["cpu"]) as ort:
            want = ort.run(x)
        assert list(got) == ["logits"]
        np.testing.assert_allclose(got["logits"], want["logits"], rtol=1e-4, atol=1e-5)
        assert e.info.cache_hit is False and e.info.settings["programs"][0]["inputs"] == {
            "map_input_dims": {"input": [2, 3, 32, 32]}
        }

    def test_second_engine_loads_from_the_cache(self, stand_in, tmp_path: Path) -> None:
        model = models.tiny_cnn()
        shapes = {"input": (1, 3, 32, 32)}
        amdinfer.load(model, backend="migraphx", target="ref", shapes=shapes, cache_dir=tmp_path).close()
        stand_in.calls.clear()
        with amdinfer.load(model, backend="migraphx", target="ref", shapes=shapes, cache_dir=tmp_path) as e:
            assert e.info.cache_hit is True
        assert stand_in.calls == ["load:msgpack"]

    def test_per_shape_programs_and_buckets(self, stand_in) -> None:
        model = models.tiny_cnn()
        x = models.random_inputs(model, batch=7, seed=1)["input"]
        with amdinfer.load(model, backend="migraphx", target="ref", batch_buckets=[2, 4, 8], cache=False) as e:
            assert e.programs == 0  # symbolic batch and no bounds: compiled on first use
            for n in (1, 2, 3, 4, 7):
                assert e.run(x[:n])["logits"].shape == (n, 10)
            assert e.programs == 3
        assert stand_in.calls.count("parse_onnx_buffer:static") == 3

    def test_dynamic_program_and_fp16(self, stand_in) -> None:
        shapes = {"input": [(1, 3, 32, 32), (4, 3, 32, 32), (2, 3, 32, 32)]}
        with amdinfer.load(
            models.tiny_cnn(),
            backend="migraphx",
            target="ref",
            shapes=shapes,
            dynamic_shapes="program",
            precision="fp16",
            cache=False,
        ) as e:
            assert e.programs == 1 and e.info.precision == "fp16"
            assert e.info.settings["quantization"] == "migraphx.quantize_fp16(ins_names=['all'])"
        assert stand_in.calls[:2] == ["parse_onnx_buffer:dyn", "quantize_fp16:['all']"]

    def test_unsupported_operator_is_caught_before_parsing(self, stand_in) -> None:
        with pytest.raises(amdinfer.UnsupportedOperatorError, match=r"\['Det'\]"):
            amdinfer.load(one_node_model("Det"), backend="migraphx", target="ref")
        assert stand_in.calls == []

    def test_missing_target(self, stand_in) -> None:
        with pytest.raises(amdinfer.BackendUnavailableError, match="cpu target exists only in MIGraphX builds"):
            amdinfer.load(models.tiny_cnn(), backend="migraphx", target="cpu")

    def test_int8_plan_from_the_quantizer(self, stand_in) -> None:
        from amdinfer.quantize import Int8Quantizer

        cal = [models.random_inputs(models.tiny_cnn(), batch=1, seed=i)["input"] for i in range(3)]
        q = Int8Quantizer(calibration=cal, progress=False, cache=False)
        with amdinfer.load(
            models.tiny_cnn(),
            backend="migraphx",
            target="ref",
            quantizer=q,
            shapes={"input": (2, 3, 32, 32)},
            cache=False,
        ) as e:
            assert e.info.precision == "int8"
        (call,) = [c for c in stand_in.calls if c.startswith("quantize_int8")]
        # three batch-1 samples re-batched to the program's batch of 2
        assert call == "quantize_int8:ref:['convolution', 'dot']:[{'input': (2, 3, 32, 32)}, {'input': (2, 3, 32, 32)}]"

    def test_offload_copy_off_copies_around_the_run(self, stand_in) -> None:
        model = models.tiny_cnn()
        x = models.random_inputs(model, batch=1, seed=2)["input"]
        with amdinfer.load(
            model, backend="migraphx", target="gpu", offload_copy=False, shapes={"input": x.shape}, cache=False
        ) as e:
            stand_in.calls.clear()
            out = e.run(x)["logits"]
            assert e.info.device == "rocm:0"
        assert stand_in.calls == ["to_gpu", "allocate_gpu", "run", "from_gpu"]
        with amdinfer.load(model, backend="ort", providers=["cpu"]) as ort:
            np.testing.assert_allclose(out, ort.run(x)["logits"], rtol=1e-4, atol=1e-5)
