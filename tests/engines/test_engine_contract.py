"""The engine contract: every engine kind available here must pass these.

Outputs are checked against onnx's ReferenceEvaluator (an independent implementation). Kinds whose
backend cannot run on this machine are skipped with the backend's own reason.
"""

from __future__ import annotations

import pickle

import numpy as np
import onnx
import pytest
from _oracle import oracle
from onnx import TensorProto, helper

import amdinfer
from amdinfer import verify
from amdinfer.testing import conformance, models

# name -> (builder call, batch); sizes kept small so the plain evaluator stays quick.
MODELS = {
    "tiny_cnn": (lambda: models.tiny_cnn(), 2),
    "transformer_encoder": (lambda: models.transformer_encoder(), 2),
    "resnet50": (lambda: models.resnet50(image_size=64, num_classes=100), 1),
    "yolov8": (lambda: models.yolov8(image_size=64, num_classes=8), 1),
    "yolov5": (lambda: models.yolov5(image_size=64, num_classes=8), 1),
}

# RMS tolerances (MIGraphX's verify metric) per precision the kind runs at. The oracle runs the
# float32 model in float32, so a float64 engine is held to the float32 tolerance against it.
RMS_TOL = {"fp32": 1e-3, "fp64": 1e-3, "fp16": 8e-2}
ORACLE_PRECISION = {"fp32": "fp32", "fp64": "fp32", "fp16": "fp16"}


def two_input_model() -> onnx.ModelProto:
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 4])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "add2", [a, b], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def built() -> dict[str, onnx.ModelProto]:
    return {name: make() for name, (make, _) in MODELS.items()}


@pytest.mark.parametrize("model_name", list(MODELS))
def test_outputs_match_onnx_reference(engine_kind: str, model_name: str, built: dict) -> None:
    model = built[model_name]
    feeds = models.random_inputs(model, batch=MODELS[model_name][1], seed=1)
    expected = oracle(model, feeds)
    with conformance.make_engine(engine_kind, model) as engine:
        got = engine.run(feeds)
        assert list(got) == [o.name for o in model.graph.output]
        for spec in engine.outputs:
            assert got[spec.name].dtype == spec.dtype
    precision = conformance.ENGINE_KINDS[engine_kind].precision
    report = verify.compare(got, expected, rms_tol=RMS_TOL[precision], precision=ORACLE_PRECISION[precision])
    assert report.passed, report


def test_specs_describe_the_model(engine_kind: str, built: dict) -> None:
    model = built["yolov8"]
    with conformance.make_engine(engine_kind, model) as engine:
        (inp,) = engine.inputs
        assert inp.name == "images" and inp.dtype == np.float32 and inp.shape[1:] == (3, 64, 64)
        assert isinstance(inp.shape[0], str)  # symbolic batch
        (out,) = engine.outputs
        assert out.name == "output0" and out.shape[1:] == (4 + 8, 64 + 16 + 4)


def test_single_array_feed_equals_dict_feed(engine_kind: str) -> None:
    model = models.tiny_cnn()
    x = models.random_inputs(model, batch=2)["input"]
    with conformance.make_engine(engine_kind, model) as engine:
        np.testing.assert_array_equal(engine.run(x)["logits"], engine.run({"input": x})["logits"])


def test_batch_rows_are_independent(engine_kind: str) -> None:
    model = models.tiny_cnn()
    x = models.random_inputs(model, batch=3)["input"]
    with conformance.make_engine(engine_kind, model) as engine:
        full = engine.run(x)["logits"]
        for i in range(3):
            row = engine.run(x[i : i + 1])["logits"]
            assert verify.compare(row, full[i : i + 1], rms_tol=RMS_TOL["fp16"]).passed


class TestBadInput:
    @pytest.fixture
    def engine(self, engine_kind: str):
        with conformance.make_engine(engine_kind, two_input_model()) as engine:
            yield engine

    def ok(self, n: int = 2) -> dict[str, np.ndarray]:
        return {"a": np.ones((n, 4), np.float32), "b": np.full((n, 4), 2, np.float32)}

    def test_wrong_name(self, engine) -> None:
        feeds = self.ok()
        feeds["c"] = feeds.pop("b")
        with pytest.raises(amdinfer.InputError, match=r"missing \['b'\].*unknown \['c'\]"):
            engine.run(feeds)

    def test_missing_input(self, engine) -> None:
        with pytest.raises(amdinfer.InputError, match=r"missing \['b'\]"):
            engine.run({"a": self.ok()["a"]})

    def test_extra_input(self, engine) -> None:
        with pytest.raises(amdinfer.InputError, match=r"unknown \['z'\]"):
            engine.run({**self.ok(), "z": np.ones((2, 4), np.float32)})

    def test_single_array_for_two_inputs(self, engine) -> None:
        with pytest.raises(amdinfer.InputError, match=r"expected a dict with inputs \['a', 'b'\]"):
            engine.run(np.ones((2, 4), np.float32))

    def test_wrong_dtype(self, engine) -> None:
        feeds = self.ok()
        feeds["a"] = feeds["a"].astype(np.float64)
        with pytest.raises(amdinfer.InputError, match=r"input 'a': got dtype float64, expected float32"):
            engine.run(feeds)

    def test_wrong_rank(self, engine) -> None:
        feeds = self.ok()
        feeds["b"] = np.ones((2, 4, 1), np.float32)
        with pytest.raises(
            amdinfer.InputError, match=r"input 'b': got shape \(2, 4, 1\) \(rank 3\), expected \(N, 4\)"
        ):
            engine.run(feeds)

    def test_wrong_static_dim(self, engine) -> None:
        feeds = self.ok()
        feeds["a"] = np.ones((2, 5), np.float32)
        with pytest.raises(
            amdinfer.InputError, match=r"input 'a': got shape \(2, 5\), expected \(N, 4\) \(axis 1 must be 4\)"
        ):
            engine.run(feeds)

    def test_symbolic_dims_must_agree(self, engine) -> None:
        feeds = self.ok()
        feeds["b"] = np.ones((3, 4), np.float32)
        with pytest.raises(amdinfer.InputError, match=r"input 'b': axis 0 \('N'\) is 3, but input 'a' has 'N' = 2"):
            engine.run(feeds)

    def test_zero_size_batch(self, engine) -> None:
        if engine.accepts_zero_size:  # the reference engine: ONNX defines empty tensors, so the oracle takes them
            got = engine.run(self.ok(0))
            assert got["y"].shape == (0, 4) and got["y"].dtype == np.float32
            return
        with pytest.raises(amdinfer.InputError, match=r"input 'a': got shape \(0, 4\) with a zero-size axis 0"):
            engine.run(self.ok(0))

    def test_non_contiguous_is_accepted(self, engine) -> None:
        base = np.arange(32, dtype=np.float32).reshape(4, 8)
        a = base[:, ::2]  # strided view
        b = np.asfortranarray(np.ones((4, 4), np.float32))
        assert not a.flags.c_contiguous
        y = engine.run({"a": a, "b": b})["y"]
        np.testing.assert_array_equal(y, a + 1)

    def test_nan_passes_through(self, engine) -> None:
        feeds = self.ok()
        feeds["a"][0, 1] = np.nan
        y = engine.run(feeds)["y"]
        assert np.isnan(y[0, 1]) and np.isfinite(np.delete(y.ravel(), 1)).all()

    def test_closed_engine(self, engine) -> None:
        engine.close()
        engine.close()  # idempotent
        assert engine.closed
        with pytest.raises(amdinfer.EngineClosedError, match="engine is closed"):
            engine.run(self.ok())

    def test_unknown_output_name(self, engine) -> None:
        with pytest.raises(amdinfer.InputError, match="outputs"):
            engine.run(self.ok(), outputs=["nope"])


def test_pickle_round_trip(engine_kind: str) -> None:
    model = models.tiny_cnn()
    x = models.random_inputs(model, batch=2)["input"]
    with conformance.make_engine(engine_kind, model) as engine:
        clone = pickle.loads(pickle.dumps(engine))
        try:
            assert type(clone) is type(engine) and clone is not engine
            assert clone.info.backend == engine.info.backend
            np.testing.assert_array_equal(clone.run(x)["logits"], engine.run(x)["logits"])
        finally:
            clone.close()


def test_context_manager_closes(engine_kind: str) -> None:
    with conformance.make_engine(engine_kind, models.tiny_cnn()) as engine:
        assert not engine.closed
    assert engine.closed


def test_info_is_filled(engine_kind: str) -> None:
    with conformance.make_engine(engine_kind, models.tiny_cnn()) as engine:
        info = engine.info
        assert info.backend == conformance.ENGINE_KINDS[engine_kind].options["backend"]
        assert info.precision == conformance.ENGINE_KINDS[engine_kind].precision
        assert info.load_seconds > 0 and info.device


def test_batch_buckets_pad_and_cut(engine_kind: str) -> None:
    model = models.tiny_cnn()
    x = models.random_inputs(model, batch=11, seed=3)["input"]
    with conformance.make_engine(engine_kind, model) as plain:
        want = plain.run(x)["logits"]
    with conformance.make_engine(engine_kind, model, batch_buckets=[1, 2, 4, 8]) as bucketed:
        for n in (1, 3, 5, 8, 11):  # 11 > largest bucket: split into 8 + 3 (padded to 4)
            got = bucketed.run(x[:n])["logits"]
            assert got.shape == (n, 10)
            assert verify.compare(got, want[:n], rms_tol=RMS_TOL["fp16"]).passed


# ---------------------------------------------------------------------------------------------- sequence / optional
def sequence_model() -> onnx.ModelProto:
    """``s``: sequence(tensor(float, (K, 2))) and ``x`` (1, 2) -> ``grown`` (``s`` with ``x`` appended, a sequence)
    and ``joined`` (its tensors concatenated on axis 0)."""
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, ["K", 2]))
    nodes = [
        helper.make_node("SequenceInsert", ["s", "x"], ["grown"]),
        helper.make_node("ConcatFromSequence", ["grown"], ["joined"], axis=0),
    ]
    inputs = [helper.make_value_info("s", seq), helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])]
    outputs = [
        helper.make_tensor_value_info("joined", TensorProto.FLOAT, ["M", 2]),
        helper.make_value_info("grown", seq),
    ]
    graph = helper.make_graph(nodes, "seq", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def optional_model(identity: bool = True) -> onnx.ModelProto:
    """``o``: optional(tensor(float, (2, N))) -> ``has`` (OptionalHasElement) and, with ``identity``, ``same``
    (``o`` itself, an optional output)."""
    opt = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2, "N"]))
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"])]
    outputs = [helper.make_tensor_value_info("has", TensorProto.BOOL, [])]
    if identity:
        nodes.append(helper.make_node("Identity", ["o"], ["same"]))
        outputs.append(helper.make_value_info("same", opt))
    graph = helper.make_graph(nodes, "opt", [helper.make_value_info("o", opt)], outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


def _takes_containers(engine_kind: str) -> bool:
    from amdinfer.engines.registry import get_backend

    backend = conformance.ENGINE_KINDS[engine_kind].options["backend"]
    return bool(get_backend(backend).resolve().supports_containers)


def _seq_feeds() -> dict:
    rng = np.random.default_rng(5)
    return {
        "s": [rng.standard_normal((k, 2)).astype(np.float32) for k in (1, 3)],
        "x": rng.standard_normal((1, 2)).astype(np.float32),
    }


class TestSequenceAndOptionalIO:
    def test_a_backend_without_them_refuses_at_load(self, engine_kind: str) -> None:
        if _takes_containers(engine_kind):
            pytest.skip(f"{engine_kind} takes sequence and optional values")
        with pytest.raises(amdinfer.ModelError, match=r"input 's' is a sequence\(tensor\(float32\)\).*tensors only"):
            conformance.make_engine(engine_kind, sequence_model())

    @pytest.fixture
    def seq_engine(self, engine_kind: str):
        if not _takes_containers(engine_kind):
            pytest.skip(f"{engine_kind} takes tensors only (tested by test_a_backend_without_them_refuses_at_load)")
        try:
            engine = conformance.make_engine(engine_kind, sequence_model())
        except amdinfer.BackendUnavailableError as exc:  # a plugin EP with a device here that takes no such node
            assert "took no node of the model" in str(exc), exc  # refused, never run on the CPU behind its back
            pytest.skip(f"{engine_kind}: the requested EP takes no node of a sequence model (refused: {exc})")
        with engine:
            yield engine

    def test_specs_say_sequence(self, seq_engine) -> None:
        s, x = seq_engine.inputs
        assert (s.name, s.is_sequence, s.is_optional, s.is_tensor) == ("s", True, False, False)
        assert s.dtype == np.float32 and s.shape == ("K", 2) and s.type_name == "sequence(tensor(float32))"
        assert x.is_tensor and x.shape == (1, 2)
        assert [o.is_sequence for o in seq_engine.outputs] == [False, True]

    @pytest.mark.parametrize("as_tuple", [False, True])
    def test_sequence_matches_onnx_reference(self, seq_engine, as_tuple: bool) -> None:
        feeds = _seq_feeds()
        expected = oracle(sequence_model(), feeds)
        if as_tuple:
            feeds["s"] = tuple(feeds["s"])
        got = seq_engine.run(feeds)
        assert list(got) == ["joined", "grown"]
        assert isinstance(got["grown"], list) and len(got["grown"]) == len(expected["grown"]) == 3
        for g, e in zip(got["grown"], expected["grown"]):
            assert g.dtype == e.dtype and g.shape == e.shape
            np.testing.assert_array_equal(g, e)
        np.testing.assert_allclose(got["joined"], expected["joined"], rtol=1e-6)
        assert got["joined"].shape == (5, 2)

    def test_an_empty_sequence_runs(self, seq_engine) -> None:
        feeds = {"s": [], "x": np.ones((1, 2), np.float32)}
        got = seq_engine.run(feeds)
        expected = oracle(sequence_model(), feeds)
        assert len(got["grown"]) == len(expected["grown"]) == 1
        np.testing.assert_array_equal(got["joined"], expected["joined"])

    @pytest.mark.parametrize(
        ("s", "match"),
        [
            (
                np.ones((2, 2), np.float32),
                r"input 's': got a ndarray, expected a list of float32 arrays of shape \(K, 2\)",
            ),
            (None, r"input 's': got None, expected a list .* \(only optional inputs may be None\)"),
            ([np.ones((1, 2), np.float32), np.ones((1, 2))], r"input 's' item 1: got dtype float64, expected float32"),
            ([np.ones(2, np.float32)], r"input 's' item 0: got shape \(2,\) \(rank 1\), expected \(K, 2\)"),
            (
                [np.ones((1, 3), np.float32)],
                r"input 's' item 0: got shape \(1, 3\), expected \(K, 2\) \(axis 1 must be 2\)",
            ),
            ([[[0.1, 0.2]]], r"input 's' item 0: got a list of float64 values that float32 cannot hold exactly"),
            (["a"], r"input 's' item 0: got str, expected a numpy array of float32"),
        ],
    )
    def test_bad_sequence_is_named(self, seq_engine, s, match: str) -> None:
        with pytest.raises(amdinfer.InputError, match=match):
            seq_engine.run({"s": s, "x": np.ones((1, 2), np.float32)})

    def test_zero_size_item(self, seq_engine) -> None:
        feeds = {"s": [np.ones((0, 2), np.float32)], "x": np.ones((1, 2), np.float32)}
        if not seq_engine.accepts_zero_size:
            with pytest.raises(
                amdinfer.InputError, match=r"input 's' item 0: got shape \(0, 2\) with a zero-size axis 0"
            ):
                seq_engine.run(feeds)
            return
        np.testing.assert_array_equal(seq_engine.run(feeds)["joined"], oracle(sequence_model(), feeds)["joined"])

    def test_lossless_lists_are_items(self, seq_engine) -> None:
        got = seq_engine.run({"s": [[[1, 2]], np.zeros((1, 2), np.float32)], "x": np.ones((1, 2), np.float32)})
        np.testing.assert_array_equal(got["joined"], [[1, 2], [0, 0], [1, 1]])

    def test_non_contiguous_items_are_accepted(self, seq_engine) -> None:
        base = np.arange(12, dtype=np.float32).reshape(2, 6)
        item = base[:, ::3]  # (2, 2), not contiguous
        got = seq_engine.run({"s": [item], "x": np.ones((1, 2), np.float32)})
        np.testing.assert_array_equal(got["grown"][0], item)

    def test_batch_buckets_and_prepare_are_refused(self, engine_kind: str, seq_engine) -> None:
        with pytest.raises(
            amdinfer.OptionError, match=r"batch_buckets: .*input 's' is a sequence\(tensor\(float32\)\)"
        ):
            conformance.make_engine(engine_kind, sequence_model(), batch_buckets=[1, 2])
        with pytest.raises(amdinfer.InputError, match=r"input 's': prepare\(\) binds tensors"):
            seq_engine.prepare(_seq_feeds())
        with pytest.raises(amdinfer.OptionError, match=r"shapes\['s'\]: .*sequence"):
            conformance.make_engine(engine_kind, sequence_model(), shapes={"s": (1, 2)})

    def test_optional_present_and_absent(self, engine_kind: str) -> None:
        if not _takes_containers(engine_kind):
            with pytest.raises(amdinfer.ModelError, match=r"input 'o' is a optional\(tensor\(float32\)\)"):
                conformance.make_engine(engine_kind, optional_model())
            return
        value = np.arange(6, dtype=np.float32).reshape(2, 3)
        try:
            first = conformance.make_engine(engine_kind, optional_model())
        except amdinfer.BackendUnavailableError as exc:  # OpenVINO's CPU plugin fails to build an optional graph
            assert engine_kind == "ort-openvino", exc  # refused with its cause, never run elsewhere silently
            pytest.skip(f"{engine_kind}: the requested EP cannot build an optional-input model (refused: {exc})"[:400])
        with first as engine:
            (o,) = engine.inputs
            assert o.is_optional and not o.is_sequence and o.type_name == "optional(tensor(float32))"
            got = engine.run({"o": value})
            expected = oracle(optional_model(), {"o": value})
            assert bool(got["has"]) is bool(expected["has"]) is True
            np.testing.assert_array_equal(got["same"], expected["same"])
            with pytest.raises(amdinfer.InputError, match=r"input 'o': got shape \(3, 2\), expected \(2, N\)"):
                engine.run({"o": value.T.copy()})
        # onnx.reference's Identity cannot return an absent optional: the oracle for None is OptionalHasElement alone.
        with conformance.make_engine(engine_kind, optional_model(identity=False)) as engine:
            got = engine.run({"o": None})
            expected = oracle(optional_model(identity=False), {"o": None})
            assert bool(got["has"]) is bool(expected["has"]) is False


def test_tensor_only_consumers_refuse_sequences_by_name() -> None:
    """Pipelines, the server's workers, compare_engines and random_inputs take tensors: a typed error names it."""
    from amdinfer.serve._workers import EngineWorker

    model = sequence_model()
    with amdinfer.load(model, backend="reference") as engine, amdinfer.load(model, backend="reference") as other:
        with pytest.raises(amdinfer.ModelError, match=r"input 's' is a sequence\(tensor\(float32\)\), but the server"):
            EngineWorker(engine)
        with pytest.raises(amdinfer.ModelError, match=r"output 'grown' is a sequence\(tensor\(float32\)\)"):
            verify.compare_engines(engine, other, _seq_feeds())
        # the tensor output alone compares
        assert verify.compare_engines(engine, other, _seq_feeds(), outputs=["joined"]).passed
    with pytest.raises(TypeError, match=r"input 's': got a sequence_type, expected a tensor"):
        models.random_inputs(model)
    from amdinfer.cli._feeds import make_feeds

    with pytest.raises(
        amdinfer.ModelError, match=r"input 's' is a sequence\(tensor\(float32\)\), but the command line"
    ):
        make_feeds(amdinfer.ModelSource.from_any(model).inputs, {"s": (1, 2), "x": (1, 2)}, seed=0)
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, ["K", 2]))
    joined = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", 2])
    node = helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)
    one_input = helper.make_graph([node], "one", [helper.make_value_info("s", seq)], [joined])
    with amdinfer.load(
        helper.make_model(one_input, opset_imports=[helper.make_opsetid("", 17)]), backend="reference"
    ) as e:
        with pytest.raises(amdinfer.ModelError, match=r"input 's' is a sequence\(tensor\(float32\)\), but a Pipeline"):
            amdinfer.Pipeline(engine=e)
