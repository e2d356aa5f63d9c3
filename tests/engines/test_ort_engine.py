"""The ONNX Runtime engine on the CPU build: provider selection, option mapping, no silent fallback."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import amdinfer
from amdinfer.engines import ort as ort_engine
from amdinfer.engines.ort import OrtEngine, provider_options
from amdinfer.errors import OptionError
from amdinfer.testing import models


@pytest.fixture(scope="module")
def cnn():
    return models.tiny_cnn()


class TestProviderOptions:
    """Names checked against ONNX Runtime's sources (migraphx_execution_provider_info.h,
    rocm_execution_provider_info.cc, cuda_execution_provider_info.cc)."""

    def test_migraphx(self) -> None:
        opts = provider_options(
            "MIGraphXExecutionProvider",
            device=2,
            precision="fp16",
            exhaustive_tune=True,
            memory_limit=1 << 30,
            model_cache_dir="/tmp/mxr",
        )
        assert opts == {
            "device_id": "2",
            "migraphx_fp16_enable": "1",
            "migraphx_exhaustive_tune": "1",
            "migraphx_mem_limit": str(1 << 30),
            "migraphx_model_cache_dir": "/tmp/mxr",
        }

    def test_migraphx_int8_with_table(self) -> None:
        opts = provider_options(
            "MIGraphXExecutionProvider", precision="int8", int8_calibration_table="/t/calib.flatbuffers"
        )
        assert opts["migraphx_int8_enable"] == "1"
        assert opts["migraphx_int8_calibration_table_name"] == "/t/calib.flatbuffers"
        assert opts["migraphx_int8_use_native_calibration_table"] == "0"

    def test_rocm(self) -> None:
        opts = provider_options(
            "ROCMExecutionProvider", device=1, exhaustive_tune=True, tunable_ops=True, memory_limit=5, gpu_graphs=True
        )
        assert opts == {
            "device_id": "1",
            "miopen_conv_exhaustive_search": "1",
            "tunable_op_enable": "1",
            "tunable_op_tuning_enable": "1",
            "gpu_mem_limit": "5",
            "enable_hip_graph": "1",
        }

    def test_cuda(self) -> None:
        opts = provider_options("CUDAExecutionProvider", exhaustive_tune=False, gpu_graphs=True, prefer_nhwc=True)
        assert opts == {
            "device_id": "0",
            "cudnn_conv_algo_search": "HEURISTIC",
            "enable_cuda_graph": "1",
            "prefer_nhwc": "1",
        }

    def test_cpu_takes_none(self) -> None:
        assert provider_options("CPUExecutionProvider", exhaustive_tune=True) == {}

    def test_none_leaves_defaults(self) -> None:
        assert provider_options("ROCMExecutionProvider") == {"device_id": "0"}


def test_short_provider_names() -> None:
    assert [ort_engine.resolve_provider_name(n) for n in ("migraphx", "ROCm", "cuda", "cpu")] == list(
        ort_engine.PROVIDER_ORDER
    )


def test_runs_and_matches_raw_onnxruntime(cnn) -> None:
    x = models.random_inputs(cnn, batch=4)["input"]
    raw = ort.InferenceSession(cnn.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    engine = amdinfer.load(cnn, backend="ort", providers=["cpu"])
    np.testing.assert_array_equal(engine.run(x)["logits"], raw)
    assert engine.info.providers == ["CPUExecutionProvider"]
    assert engine.info.requested_providers == ["CPUExecutionProvider"]
    assert engine.info.runtime_version == ort.__version__


@pytest.mark.skipif("CUDAExecutionProvider" in ort.get_available_providers(), reason="this build has the CUDA EP")
def test_requested_provider_missing_from_build_is_an_error(cnn) -> None:
    with pytest.raises(
        amdinfer.BackendUnavailableError, match=r"provider 'CUDAExecutionProvider' is not in this onnxruntime build"
    ) as info:
        amdinfer.load(cnn, providers=["cuda"])
    assert "amdinfer-onnx[cuda]" in str(info.value)
    assert isinstance(info.value, ImportError)


def test_auto_records_why_providers_were_passed_over(cnn) -> None:
    engine = amdinfer.load(cnn, backend="ort")
    used = engine.info.providers
    for name in ort_engine.PROVIDER_ORDER[:3]:
        if name not in used:
            assert engine.info.skipped.get(name)
    if used == ["CPUExecutionProvider"]:
        assert engine.info.device == "cpu"


def test_backend_auto_explains_skipped_backends(cnn) -> None:
    engine = amdinfer.load(cnn)
    assert engine.info.backend in ("ort", "migraphx")
    if engine.info.backend == "ort":
        assert "migraphx" in engine.info.skipped


def test_engine_instance_passes_through(cnn) -> None:
    engine = amdinfer.load(cnn, backend="ort", providers=["cpu"])
    assert amdinfer.load(cnn, backend=engine) is engine
    with pytest.raises(amdinfer.OptionError):
        amdinfer.load(cnn, backend=engine, threads=2)


def test_unknown_option_is_a_type_error(cnn) -> None:
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['thread'\]"):
        amdinfer.load(cnn, backend="ort", thread=2)


def test_unknown_backend_lists_the_known_ones(cnn) -> None:
    with pytest.raises(amdinfer.OptionError, match=r"backend: got 'tensorrt', expected one of \[.*'ort'.*\]"):
        amdinfer.load(cnn, backend="tensorrt")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"graph_optimization": "max"}, "graph_optimization: got 'max'"),
        ({"threads": -1}, "threads: got -1"),
        ({"precision": "fp7"}, "precision: got 'fp7'"),
        ({"device": -1}, "device: got -1"),
        ({"providers": []}, "providers: got an empty list"),
        ({"precision": "int8"}, "int8 needs calibration data"),
    ],
)
def test_bad_options(cnn, kwargs, match) -> None:
    kwargs.setdefault("providers", ["cpu"])
    with pytest.raises(amdinfer.OptionError, match=match):
        OrtEngine(cnn, **kwargs)


def test_session_options_are_applied(cnn, tmp_path) -> None:
    out = tmp_path / "opt.onnx"
    engine = OrtEngine(cnn, providers=["cpu"], threads=1, graph_optimization="basic", optimized_model_path=out)
    session = engine.session.get_session_options()
    assert session.intra_op_num_threads == 1
    assert session.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    assert out.exists()  # ONNX Runtime wrote the optimized model where we asked
    assert engine.info.settings["session"]["intra_op_num_threads"] == 1


def test_fp16_without_a_precision_quantizer_says_how(cnn) -> None:
    """Built directly (not through amdinfer.load), the engine has no quantizer for a bare fp16 on the CPU."""
    with pytest.raises(amdinfer.OptionError, match=r"precision='fp16' on CPUExecutionProvider: .*amdinfer.load"):
        OrtEngine(cnn, providers=["cpu"], precision="fp16")
    from amdinfer.quantize import Fp16Quantizer, precision_quantizer

    direct = OrtEngine(cnn, providers=["cpu"], precision="fp16", precision_quantizer=precision_quantizer)
    explicit = OrtEngine(cnn, providers=["cpu"], quantizer=Fp16Quantizer())
    assert direct.model.proto.graph == explicit.model.proto.graph  # the same rewrite


def test_fp16_on_cpu_converts_the_model_and_stays_close(cnn) -> None:
    x = models.random_inputs(cnn, batch=2)["input"]
    ref = OrtEngine(cnn, providers=["cpu"]).run(x)["logits"]
    half = amdinfer.load(cnn, providers=["cpu"], precision="fp16")
    assert isinstance(half, OrtEngine) and half.info.precision == "fp16"
    assert half.inputs[0].dtype == np.float32  # I/O kept in fp32
    assert any(t.data_type == 10 for t in half.model.proto.graph.initializer)  # weights are fp16
    got = half.run(x)["logits"]
    assert amdinfer.verify.compare(got, ref, precision="fp16").passed


def test_outputs_all_returns_intermediate_tensors(cnn) -> None:
    engine = OrtEngine(cnn, providers=["cpu"])
    x = models.random_inputs(cnn)["input"]
    everything = engine.run(x, outputs="all")
    node_outputs = [o for n in cnn.graph.node for o in n.output]
    assert set(node_outputs) <= set(everything)
    np.testing.assert_allclose(everything["logits"], engine.run(x)["logits"], rtol=1e-5, atol=1e-6)
    first = cnn.graph.node[0].output[0]
    assert list(engine.run(x, outputs=[first])) == [first]


def test_model_needing_newer_runtime_ir_is_lowered(cnn, monkeypatch) -> None:
    """When ONNX Runtime refuses the IR version, the engine lowers it (when safe) and says so."""
    real = ort.InferenceSession
    calls = []

    def picky(model, *a, **k):
        import onnx

        ir = onnx.load_model_from_string(model).ir_version if isinstance(model, bytes) else 0
        calls.append(ir)
        if ir > 9:
            raise RuntimeError(f"Unsupported model IR version: {ir}, max supported IR version: 9")
        return real(model, *a, **k)

    monkeypatch.setattr(ort, "InferenceSession", picky)
    # cache=False: the session must be built from the model's bytes (a cached optimized model is a path).
    engine = OrtEngine(cnn, providers=["cpu"], cache=False)
    assert calls[-1] == 9 and engine.model.ir_version == 9
    assert any("lowered to 9" in n for n in engine.info.notes)


def test_installed_distributions_lists_onnxruntime() -> None:
    dists = ort_engine.installed_ort_distributions()
    assert any(d.startswith("onnxruntime") for d in dists)


def test_allow_cpu_nodes_false_sets_the_strict_session_option(cnn) -> None:
    engine = OrtEngine(cnn, providers=["cpu"], allow_cpu_nodes=False)
    # CPU-only by request: nothing can "fall back"; the flag is recorded and the session runs.
    assert engine.info.settings["session"]["disable_cpu_ep_fallback"] is True
    assert engine.run(models.random_inputs(cnn))["logits"].shape == (1, 10)


# ---------------------------------------------------------------------------------------------- graph capture
def _dense_nms_model():
    """amdinfer's fused detector with the dense NMS: its greedy loop is an ONNX ``Loop``."""
    with amdinfer.yolo(models.yolov8(image_size=64, num_classes=2), fuse=False, providers=["cpu"]) as det:
        with det.fuse(nms_mode="dense") as fused:
            return fused.model


class TestGraphCaptureOnlyWithoutControlFlow:
    """ONNX Runtime refuses graph capture for a model with control-flow nodes, after logging an error line on
    stderr; amdinfer decides first. The CPU build has no CUDA EP, so the decision is checked where it is made
    (plan/apply_tuning, and the engine's provider-option step for a CUDA candidate)."""

    CUDA = "CUDAExecutionProvider"

    def test_control_flow_nodes(self, cnn) -> None:
        from onnx import helper

        from amdinfer.engines.ort._tuning import control_flow_nodes

        assert control_flow_nodes(cnn) == ()
        loops = control_flow_nodes(_dense_nms_model())
        assert len(loops) == 1 and loops[0].startswith("Loop ")
        # a Loop nested in an If's branch: the outer If is the node ONNX Runtime sees
        loop = helper.make_node("Loop", ["n", "c"], [], body=helper.make_graph([], "body", [], []))
        branch = helper.make_graph([loop], "then", [], [])
        outer = helper.make_node("If", ["cond"], [], name="gate", then_branch=branch, else_branch=branch)
        assert control_flow_nodes(helper.make_model(helper.make_graph([outer], "g", [], []))) == ("If 'gate'",)
        # a call of a local function whose body (through another function) holds a Loop
        inner = helper.make_function("local", "inner", [], [], [loop], [helper.make_opsetid("", 17)])
        middle = helper.make_function(
            "local",
            "middle",
            [],
            [],
            [helper.make_node("inner", [], [], domain="local")],
            [helper.make_opsetid("", 17)],
        )
        call = helper.make_node("middle", [], [], name="call", domain="local")
        plain = helper.make_node("Relu", ["x"], ["y"], name="relu")
        model = helper.make_model(helper.make_graph([plain, call], "g", [], []), functions=[inner, middle])
        assert control_flow_nodes(model) == ("middle 'call'",)

    def test_default_is_off_with_a_reason_and_a_note(self) -> None:
        from amdinfer.engines.ort import OrtOptions
        from amdinfer.engines.ort._tuning import apply_tuning, control_flow_nodes

        flow = control_flow_nodes(_dense_nms_model())
        settings: dict = {}
        notes: list[str] = []
        knobs, _ = apply_tuning(self.CUDA, {}, OrtOptions(), settings, control_flow=flow, notes=notes)
        assert knobs["gpu_graphs"] is False and knobs["prefer_nhwc"] is True  # only graph capture changes
        choice = settings["tuning"][self.CUDA]["gpu_graphs"]
        assert choice["source"] == "amdinfer" and flow[0] in choice["reason"] and "control-flow" in choice["reason"]
        assert len(notes) == 1 and flow[0] in notes[0]
        # the same provider without control flow keeps amdinfer's tuned default, with no note
        notes.clear()
        knobs, _ = apply_tuning(self.CUDA, {}, OrtOptions(), settings, control_flow=(), notes=notes)
        assert knobs["gpu_graphs"] is True and notes == []

    def test_explicit_request_on_control_flow_is_an_error(self) -> None:
        from amdinfer.engines.ort._tuning import plan_tuning

        with pytest.raises(OptionError, match=r"gpu_graphs=True on CUDAExecutionProvider: .*Loop 'nms'"):
            plan_tuning(self.CUDA, user={"gpu_graphs": True}, io_bound=True, control_flow=["Loop 'nms'"])
        assert plan_tuning(self.CUDA, user={"gpu_graphs": True}, io_bound=True).gpu_graphs
        assert (
            plan_tuning(self.CUDA, user={"gpu_graphs": False}, control_flow=["Loop 'nms'"]).knobs()["gpu_graphs"]
            is False
        )

    def test_engine_maps_the_decision_into_cuda_options(self) -> None:
        """The engine's provider-option step for a CUDA candidate (no session is created): the fused dense-NMS
        graph gets ``enable_cuda_graph=0`` and a note; the plain model ``1``; ``gpu_graphs=True`` is refused."""
        from amdinfer.model import ModelSource

        fused = ModelSource.from_any(_dense_nms_model())
        plain = ModelSource.from_any(models.tiny_cnn())
        with OrtEngine(fused.proto, providers=["cpu"]) as engine:
            info = amdinfer.EngineInfo(backend="ort")
            _, opts = engine._provider_list([(self.CUDA, {})], info, fused)
            assert opts[0]["enable_cuda_graph"] == "0"
            assert any("graph capture" in n and "Loop" in n for n in info.notes)
            info = amdinfer.EngineInfo(backend="ort")
            _, opts = engine._provider_list([(self.CUDA, {})], info, plain)
            assert opts[0]["enable_cuda_graph"] == "1" and info.notes == []
        with OrtEngine(fused.proto, providers=["cpu"], gpu_graphs=True) as engine:  # the CPU EP has no graphs
            with pytest.raises(OptionError, match="control-flow nodes"):
                engine._provider_list([(self.CUDA, {})], amdinfer.EngineInfo(backend="ort"), fused)


# ---------------------------------------------------------------------------------------------- precision it runs
class TestReportedPrecision:
    def test_fused_fp16_pipeline_reports_fp16(self) -> None:
        from amdinfer.postprocess import Softmax, TopK
        from amdinfer.preprocess import HwcToChw, Normalize, Resize

        pipe = amdinfer.Pipeline(
            preprocess=[Resize((32, 32)), Normalize(scale=1 / 255), HwcToChw()],
            engine=models.tiny_cnn(),
            postprocess=[Softmax(), TopK(3)],
            providers=["CPUExecutionProvider"],
            precision="fp16",
        )
        with pipe, pipe.fuse() as fused:
            assert pipe.engine.info.precision == "fp16"
            info = fused.engine.info
            assert info.precision == "fp16" and info.settings["model_precision"] == "fp16"
            assert any("already converted to fp16" in n for n in info.notes)
            assert "fp16" in repr(fused.engine)
            image = np.full((40, 40, 3), 90, np.uint8)
            assert fused(image).indices.tolist() == pipe(image).indices.tolist()

    def test_plain_fp32_model_says_fp32(self, cnn) -> None:
        with amdinfer.load(cnn, providers=["cpu"]) as engine:
            assert engine.info.precision == "fp32" and "model_precision" not in engine.info.settings
            assert not any("already converted" in n for n in engine.info.notes)
        with amdinfer.load(cnn, providers=["cpu"], precision="fp16") as engine:  # converted by the engine
            assert engine.info.precision == "fp16" and "model_precision" not in engine.info.settings

    def test_pre_converted_model_loaded_plainly(self, cnn) -> None:
        from amdinfer.quantize import Fp16Quantizer

        converted = Fp16Quantizer().quantize(cnn)
        with amdinfer.load(converted, providers=["cpu"]) as engine:
            assert engine.info.precision == "fp16"

    def test_compute_precision_rule(self) -> None:
        from onnx import TensorProto, helper, numpy_helper

        from amdinfer.engines.ort._session import compute_precision

        def model(*arrays, casts=()):
            inits = [numpy_helper.from_array(a, f"w{i}") for i, a in enumerate(arrays)]
            nodes = [helper.make_node("Cast", ["x"], [f"c{i}"], to=t) for i, t in enumerate(casts)]
            return helper.make_model(helper.make_graph(nodes, "g", [], [], inits))

        big32, small16 = np.ones((64, 64), np.float32), np.ones((4,), np.float16)
        assert compute_precision(model(big32, small16)) is None  # a few fp16 constants in an fp32 model
        assert compute_precision(model(big32.astype(np.float16), np.ones(8, np.float32))) == "fp16"
        bf16 = helper.make_tensor("b", TensorProto.BFLOAT16, [64], np.zeros(64, np.uint16).tolist(), raw=False)
        bf16_model = model(np.ones(8, np.float32))
        bf16_model.graph.initializer.append(bf16)
        assert compute_precision(bf16_model) == "bf16"
        assert compute_precision(model(casts=[TensorProto.FLOAT16])) == "fp16"  # no weights: what it casts to
        assert compute_precision(model(casts=[TensorProto.FLOAT16, TensorProto.FLOAT])) is None
        assert compute_precision(model(np.ones(4, np.int64))) is None


def _sequence_model():
    from onnx import TensorProto, helper

    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, ["K", 2]))
    node = helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)
    graph = helper.make_graph(
        [node],
        "seq",
        [helper.make_value_info("s", seq)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", 2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


class TestSequenceInputs:
    def test_match_raw_onnxruntime(self) -> None:
        model = _sequence_model()
        items = [np.ones((1, 2), np.float32), np.arange(4, dtype=np.float32).reshape(2, 2)]
        raw = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        (want,) = raw.run(None, {"s": items})
        with amdinfer.load(model, backend="ort", providers=["cpu"]) as engine:
            assert engine.info.settings["data_path"]["io_binding"] is False
            np.testing.assert_array_equal(engine.run({"s": tuple(items)})["y"], want)  # a tuple is passed as a list

    def test_io_binding_is_refused_naming_the_input(self) -> None:
        with pytest.raises(OptionError, match=r"io_binding=True: input 's' is a sequence\(tensor\(float32\)\)"):
            amdinfer.load(_sequence_model(), backend="ort", providers=["cpu"], io_binding=True)

    def test_shape_sessions_are_refused_naming_the_input(self) -> None:
        with pytest.raises(OptionError, match=r"shape_sessions: input 's' is a sequence\(tensor\(float32\)\)"):
            amdinfer.load(_sequence_model(), backend="ort", providers=["cpu"], shape_sessions=4)


def test_tensorrt_without_its_libraries_says_what_it_needs() -> None:
    """An EP amdinfer keeps no record of, but ONNX Runtime builds carry: the fix names TensorRT's libraries (measured on
    an H200 whose onnxruntime-gpu lists the EP without libnvinfer), never "check the name"."""
    from amdinfer.testing.models import tiny_cnn

    with pytest.raises(amdinfer.BackendUnavailableError) as caught:
        amdinfer.load(tiny_cnn(), providers=["TensorrtExecutionProvider"])
    said = str(caught.value)
    assert said.startswith("provider 'TensorrtExecutionProvider' ") and "TensorRT libraries (libnvinfer)" in said, said
    assert "check the name" not in said
