"""``amdinfer.verify.bisect`` and ``amdinfer verify --bisect``: planted faults must be named exactly.

The truths are the faults planted: one weight scaled by 2 %, an Add turned into a Sub, a float16 overflow, a
quantization that gives box coordinates (0-1000) and scores (0-1) one int8 scale. The reproducer is checked by
running what it wrote, not by reading the report back.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import amdinfer
from amdinfer.cli import main
from amdinfer.errors import OptionError
from amdinfer.testing.models import tiny_cnn
from amdinfer.verify import BisectReport, bisect, compare, judge, load_golden

pytestmark = pytest.mark.usefixtures("quiet_root_logger")


def _scaled(model: onnx.ModelProto, name: str, factor: float) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    w = next(t for t in out.graph.initializer if t.name == name)
    w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w) * np.float32(factor), name))
    return out


def _ort(model):
    return amdinfer.load(model, backend="ort", providers=["cpu"])


@pytest.fixture(scope="module")
def x() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)


def _chain(sub_at: int | None = None) -> onnx.ModelProto:
    """x -> (Add c_i -> Relu -> Mul 0.9) x 3 -> y; ``sub_at`` turns Add number ``sub_at`` into a Sub."""
    nodes, inits, prev = [], [], "x"
    for i in range(3):
        inits.append(numpy_helper.from_array(np.full((1, 4, 1, 1), 0.5 + i, np.float32), f"c{i}"))
        nodes.append(helper.make_node("Sub" if i == sub_at else "Add", [prev, f"c{i}"], [f"add{i}"], name=f"add{i}"))
        nodes.append(helper.make_node("Relu", [f"add{i}"], [f"relu{i}"], name=f"relu{i}"))
        nodes.append(helper.make_node("Mul", [f"relu{i}", "k"], [f"mul{i}"], name=f"mul{i}"))
        prev = f"mul{i}"
    inits.append(numpy_helper.from_array(np.float32(0.9), "k"))
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 3, 3])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class TestPlantedFault:
    def test_names_the_node_with_the_changed_weight_and_writes_a_reproducer(self, x, tmp_path) -> None:
        good = tiny_cnn()
        bad = _scaled(good, "conv2.weight", 1.02)
        with _ort(bad) as a, amdinfer.load(good, backend="reference", precision="fp64") as b:
            report = bisect(a, b, x, out_dir=tmp_path / "repro")
        assert isinstance(report, BisectReport) and not report.passed
        c = report.culprit
        assert (c.node, c.op_type, list(c.outputs)) == ("conv2", "Conv", ["conv2"])
        assert report.group == ["conv2"]
        assert list(report.inputs) == ["pool1"] and report.inputs["pool1"].passed
        assert [s.node for s in report.checked] == ["conv1", "relu1", "pool1"]
        assert all(s.passed for s in report.checked)
        assert [s.node for s in report.diverged] == ["conv2", "relu2", "avgpool", "flatten", "fc"]
        assert [s.status for s in report.diverged] == ["diverges"] + ["inherited"] * 4
        assert "first divergence at node 'conv2' (Conv, #3)" in report.verdict
        json.dumps(report.to_dict())

        repro = report.reproducer
        assert repro is not None and repro.reproduced is True
        d = tmp_path / "repro"
        expected_model, actual_model = onnx.load(d / "expected.onnx"), onnx.load(d / "actual.onnx")
        for m in (expected_model, actual_model):
            onnx.checker.check_model(m)
            assert [n.op_type for n in m.graph.node] == ["Conv"]
            assert [i.name for i in m.graph.input] == ["pool1"] and [o.name for o in m.graph.output] == ["conv2"]
        inputs = dict(np.load(d / "inputs.npz"))
        # The reproducer's input is the reference's own pool1: independent of bisect, recompute it on ORT.
        with _ort(good) as ort:
            np.testing.assert_allclose(inputs["pool1"], ort.run(x, outputs=["pool1"])["pool1"], rtol=1e-5, atol=1e-6)
        # Run what was written on both sides: it diverges again, and agrees with each side's captured outputs.
        with _ort(actual_model) as ea, amdinfer.load(expected_model, backend="reference", precision="fp64") as eb:
            ya, yb = ea.run(inputs)["conv2"], eb.run(inputs)["conv2"]
        assert not compare(ya, yb).passed
        np.testing.assert_allclose(ya, load_golden(d / "actual.npz").outputs["conv2"], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(yb, load_golden(d / "expected.npz").outputs["conv2"], rtol=1e-5, atol=1e-5)
        meta = json.loads((d / "bisect.json").read_text())
        assert meta["culprit"]["node"] == "conv2" and "amdinfer verify" in meta["reproducer"]["command"]
        assert "conv2" in (d / "README.md").read_text()

    def test_an_early_fault_that_every_later_node_inherits_names_the_early_node(self, x) -> None:
        good = tiny_cnn()
        report = bisect(_scaled(good, "conv1.weight", 1.05), good, x)
        assert report.culprit.node == "conv1" and report.checked == []
        assert len(report.diverged) == len(good.graph.node)  # every later node diverges too
        assert {s.status for s in report.diverged[1:]} == {"inherited"}

    @pytest.mark.parametrize("at", [0, 1, 2])
    def test_an_add_turned_into_a_sub_is_named(self, at, tmp_path) -> None:
        feeds = {"x": np.random.default_rng(at).standard_normal((1, 4, 3, 3)).astype(np.float32) * 3}
        report = bisect(_chain(sub_at=at), _chain(), feeds, out_dir=tmp_path)
        assert report.culprit.node == f"add{at}"
        assert all(r is None or r.passed for r in report.inputs.values())
        assert report.reproducer.reproduced is True
        m = onnx.load(tmp_path / "actual.onnx")
        assert [n.op_type for n in m.graph.node] == ["Sub"]

    def test_two_backends_that_agree(self, x, tmp_path) -> None:
        with _ort(tiny_cnn()) as a:
            report = bisect(a, None, x, out_dir=tmp_path / "none")
        assert report.passed and report.culprit is None and report.reproducer is None
        assert report.verdict == "no divergence: all 8 compared tensors within tolerance"
        assert not (tmp_path / "none").exists()

    def test_fp16_overflow_is_named_and_reproduced(self, tmp_path) -> None:
        """x * 300 * 300 exceeds float16's 65504 at the second Mul: Inf where fp32 has a number."""
        nodes = [
            helper.make_node("Mul", ["x", "k"], ["m1"], name="m1"),
            helper.make_node("Mul", ["m1", "k"], ["m2"], name="m2"),
            helper.make_node("Mul", ["m2", "s"], ["y"], name="m3"),
        ]
        graph = helper.make_graph(
            nodes,
            "overflow",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4])],
            [numpy_helper.from_array(np.float32(300), "k"), numpy_helper.from_array(np.float32(1e-4), "s")],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        feeds = {"x": np.linspace(0.1, 1.0, 8, dtype=np.float32).reshape(1, 2, 4)}
        with amdinfer.load(model, backend="ort", providers=["cpu"], precision="fp16") as a, _ort(model) as b:
            report = bisect(a, b, feeds, out_dir=tmp_path)
        assert report.culprit.node == "m2" and report.inputs["m1"].passed
        assert "Inf" in report.culprit.outputs["m2"].reasons[-1]
        assert report.reproducer.reproduced is True

    def test_refuses_an_engine_without_intermediates(self, x) -> None:
        from amdinfer.engines.reference import ReferenceEngine

        class Opaque(ReferenceEngine):
            supports_all_outputs = False

        with Opaque(tiny_cnn()) as opaque, pytest.raises(OptionError, match="intermediate tensors"):
            bisect(opaque, None, x)


def _head(seed: int = 0) -> onnx.ModelProto:
    """A detection head in miniature: boxes (0-1000) and sigmoid scores (0-1) concatenated on axis 1."""
    rng = np.random.default_rng(seed)
    w = lambda *s: numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.5, f"w{len(s)}_{s[0]}")  # noqa: E731
    wf, wb, ws = w(8, 3, 3, 3), w(4, 8, 1, 1), w(2, 8, 1, 1)
    nodes = [
        helper.make_node("Conv", ["images", wf.name], ["feat"], name="stem", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["feat"], ["act"], name="act"),
        helper.make_node("Conv", ["act", wb.name], ["box_raw"], name="box_conv"),
        helper.make_node("Sigmoid", ["box_raw"], ["box_unit"], name="box_sigmoid"),
        helper.make_node("Mul", ["box_unit", "img_size"], ["boxes"], name="box_scale"),
        helper.make_node("Conv", ["act", ws.name], ["cls_raw"], name="cls_conv"),
        helper.make_node("Sigmoid", ["cls_raw"], ["scores"], name="cls_sigmoid"),
        helper.make_node("Concat", ["boxes", "scores"], ["output0"], name="head_concat", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "head",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 6, 8, 8])],
        [wf, wb, ws, numpy_helper.from_array(np.float32(1000.0), "img_size")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _quantize_static(model: onnx.ModelProto, samples: list[np.ndarray], path, **kw) -> onnx.ModelProto:
    """ONNX Runtime's own quantize_static (QDQ, per-channel int8 weights, uint8 activations)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter([{"images": s} for s in samples])

        def get_next(self):
            return next(self.it, None)

    src = path.with_suffix(".float.onnx")
    onnx.save(model, src)
    quantize_static(str(src), str(path), Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, **kw)  # fmt: skip
    return onnx.load(path)


class TestQuantized:
    def test_the_score_collapse_of_a_shared_int8_scale_is_named_at_the_concat(self, tmp_path) -> None:
        model = _head()
        rng = np.random.default_rng(1)
        samples = [rng.uniform(0, 1, (1, 3, 8, 8)).astype(np.float32) for _ in range(4)]
        q = _quantize_static(model, samples, tmp_path / "head.int8.onnx", per_channel=True)
        names = {t for n in q.graph.node for t in n.output}
        assert "scores_DequantizeLinear_Output" in names and "output0_QuantizeLinear_Input" in names
        with _ort(q) as a, _ort(model) as b:
            report = bisect(a, b, {"images": samples[0]}, out_dir=tmp_path / "repro")
        c = report.culprit
        assert (c.node, c.op_type) == ("head_concat", "Concat"), report
        assert set(report.inputs) == {"boxes", "scores"} and all(r.passed for r in report.inputs.values())
        # Judged on their own scale, the boxes agree and the scores do not: per channel, never one range.
        out = c.outputs["output0"]
        assert not out.passed and out.worst_index[1] >= 4
        # The reproducer: the quantized side holds the Q/DQ pairs and the Concat, the float side the Concat alone.
        d = tmp_path / "repro"
        qm, fm = onnx.load(d / "actual.onnx"), onnx.load(d / "expected.onnx")
        assert [n.op_type for n in fm.graph.node] == ["Concat"]
        ops = [n.op_type for n in qm.graph.node]
        assert ops.count("Concat") == 1 and ops.count("QuantizeLinear") == 3 and ops.count("DequantizeLinear") == 3
        assert {i.name for i in qm.graph.input} == {i.name for i in fm.graph.input} == {"boxes", "scores"}
        inputs = dict(np.load(d / "inputs.npz"))
        with _ort(qm) as ea, _ort(fm) as eb:
            ya, yb = ea.run(inputs)["output0"], eb.run(inputs)["output0"]
        scores_a, scores_b = ya[:, 4:], yb[:, 4:]
        assert scores_b.max() > 0.5 and np.abs(scores_a - scores_b).max() > 0.25 * scores_b.max()
        np.testing.assert_allclose(ya[:, :4], yb[:, :4], atol=0.01 * np.abs(yb[:, :4]).max())
        assert report.reproducer.reproduced is True

    def test_a_quantized_model_that_keeps_its_scores(self, tmp_path) -> None:
        """Scores kept in float (the Concat excluded): no node diverges at int8 tolerances."""
        model = _head()
        rng = np.random.default_rng(1)
        samples = [rng.uniform(0, 1, (1, 3, 8, 8)).astype(np.float32) for _ in range(4)]
        q = _quantize_static(model, samples, tmp_path / "ok.int8.onnx", per_channel=True,
                             op_types_to_quantize=["Conv"])  # fmt: skip
        with _ort(q) as a, _ort(model) as b:
            report = bisect(a, b, {"images": samples[0]})
        assert report.passed, report

    def test_judge_uses_each_channel_scale(self) -> None:
        ref = np.concatenate([np.full((1, 4, 5), 800.0), np.linspace(0, 0.9, 10).reshape(1, 2, 5)], axis=1)
        collapsed = ref.copy()
        collapsed[:, 4:] = 0
        assert compare(collapsed, ref, precision="int8", elementwise=False).passed  # one range: the trap
        assert not judge("output0", collapsed, ref, precision="int8").passed
        assert judge("output0", collapsed, ref, precision="int8", axis=None).passed  # one scale per tensor


class TestCli:
    @pytest.fixture
    def models(self, tmp_path):
        good = tiny_cnn()
        onnx.save(good, tmp_path / "good.onnx")
        onnx.save(_scaled(good, "conv2.weight", 1.02), tmp_path / "bad.onnx")
        return tmp_path

    def test_two_models_end_to_end(self, models, capsys) -> None:
        out = models / "repro"
        argv = ["verify", str(models / "bad.onnx"), str(models / "good.onnx"), "--providers", "cpu", "--no-cache"]
        assert main([*argv, "--bisect", "--out", str(out), "-q"]) == 1
        text = capsys.readouterr().out
        verdict = [line for line in text.splitlines() if line.startswith("verdict")]
        assert len(verdict) == 1 and "first divergence at node 'conv2' (Conv, #3)" in verdict[0]
        assert text.rstrip().endswith("result    FAILED (exit 1)")
        assert {p.name for p in out.iterdir()} >= {"actual.onnx", "expected.onnx", "inputs.npz", "bisect.json"}
        # the command the reproducer prints runs and fails the same way
        command = json.loads((out / "bisect.json").read_text())["reproducer"]["command"].split()
        assert command[:2] == ["amdinfer", "verify"]
        assert main([*command[1:], "--no-cache", "-q"]) == 1
        capsys.readouterr()
        assert main([*argv, "--bisect", "--json", "-q"]) == 1
        doc = json.loads(capsys.readouterr().out)
        assert doc["report"]["culprit"]["node"] == "conv2" and doc["passed"] is False

    def test_agreeing_sides_exit_zero(self, models, capsys) -> None:
        assert main(["verify", str(models / "good.onnx"), "--providers", "cpu", "--no-cache", "--bisect", "-q"]) == 0
        text = capsys.readouterr().out
        assert "verdict   no divergence" in text and "result    PASSED" in text

    @pytest.mark.parametrize(
        ("extra", "message"),
        [(["--out", "x"], "--out: the folder of the --bisect"), (["--bisect", "--per-layer"], "--bisect: walks")],
    )
    def test_option_errors_are_one_line(self, models, extra, message, capsys) -> None:
        assert main(["verify", str(models / "good.onnx"), "--providers", "cpu", *extra, "-q"]) == 1
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1
