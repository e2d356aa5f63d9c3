"""What the command line shows: short symbolic shapes, seconds with one decimal, plots whose text stays on the
canvas, cache entries named after their file, and a fixed batch axis answered with the way forward."""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from amdinfer.cli import main
from amdinfer.testing.models import random_inputs, tiny_cnn

LONG = "Floor(Div(Add(Mul(height, 2), Sub(width, 1)), 32)) * " * 8  # 424 characters, a traced export's dim


def _relu(path, shape) -> str:
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


class TestInspect:
    def test_a_long_symbolic_dim_is_named_with_a_legend(self, tmp_path, capsys) -> None:
        model = _relu(tmp_path / "sym.onnx", ["N", 3, LONG, "width"])
        assert main(["inspect", model, "--no-coverage"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert "input      x: float32 (N, 3, s0, width)" in lines
        legend = [line for line in lines if line.startswith("symbols    s0 = Floor(Div(")]
        assert len(legend) == 1 and f"({len(LONG)} characters; --json)" in legend[0]
        assert max(len(line) for line in lines) < 200, max(lines, key=len)

    def test_json_keeps_the_whole_expression(self, tmp_path, capsys) -> None:
        model = _relu(tmp_path / "sym.onnx", ["N", 3, LONG, "width"])
        assert main(["inspect", model, "--no-coverage", "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["inputs"][0]["shape"][2] == LONG

    def test_short_names_stay_as_they_are(self, tmp_path, capsys) -> None:
        assert main(["inspect", _relu(tmp_path / "m.onnx", ["batch", 4]), "--no-coverage"]) == 0
        out = capsys.readouterr().out
        assert "input      x: float32 (batch, 4)" in out and "symbols" not in out


def test_duration_bar_shows_seconds_with_one_decimal(capsys) -> None:
    pytest.importorskip("tqdm")
    import amdinfer
    from amdinfer.bench import benchmark

    with amdinfer.load(tiny_cnn(), providers=["cpu"], cache=False) as engine:
        benchmark(engine, random_inputs(tiny_cnn()), duration=0.3, warmup=1, progress=True)
    err = capsys.readouterr().err
    assert re.search(r"\b\d\.\d/0\.3 s\b", err), err[-300:]
    assert not re.search(r"\d\.\d{3,}/", err), err[-300:]


class TestPlotText:
    """Every text of a saved figure lies inside its canvas (matplotlib's own renderer measures it)."""

    @staticmethod
    def _inside(fig) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        drawn = fig.get_tightbbox(canvas.get_renderer())  # inches, of what was drawn
        width, height = fig.get_size_inches()
        assert drawn.x0 >= -0.01 and drawn.y0 >= -0.01, drawn
        assert drawn.x1 <= width + 0.01 and drawn.y1 <= height + 0.01, (drawn, width, height)

    @pytest.mark.parametrize("worst", [0, 239, 120])
    def test_per_layer_labels_stay_on_the_canvas(self, worst) -> None:
        pytest.importorskip("matplotlib")
        from amdinfer.quantize._report import AccuracyTolerance, LayerError, QuantizationReport

        rms = np.random.default_rng(0).uniform(1e-4, 1e-2, 240)  # a detector's count; the old labels ran off
        rms[[worst, -1 if worst else 1, 5]] = [1.0, 0.5, 0.3]  # labels at the edges and the top
        name = "/model.{}/cv2/cv2.0/conv/Conv_output_0_QuantizeLinear_node_with_a_long_name_that_goes_on_and_on"
        layers = [LayerError(name.format(i), name.format(i), "Conv", float(r)) for i, r in enumerate(rms)]
        report = QuantizationReport("int8", "detect", 8, {}, None, AccuracyTolerance(), "PASS", layers=layers)
        self._inside(report.plot())

    def test_quantize_plot_is_saved_whole(self, tmp_path) -> None:
        pytest.importorskip("matplotlib")
        from matplotlib.figure import Figure

        from amdinfer.cli._outputs import save_figure

        fig = Figure(figsize=(3, 2))
        fig.add_subplot().set_xlabel("a label longer than the figure is wide " * 2)
        save_figure(fig, tmp_path / "p.png", "--plot")  # bbox_inches="tight": the file holds the whole label
        from matplotlib.image import imread

        w = imread(tmp_path / "p.png").shape[1]
        assert w > 300  # wider than the 3-inch (300 pixel) canvas: nothing was cut


def test_int8_cache_entry_is_named_after_the_file(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("AMDINFER_CACHE_DIR", str(tmp_path / "cache"))
    model = tmp_path / "cnn.onnx"
    onnx.save(tiny_cnn(), model)
    data = np.random.default_rng(0).random((16, 3, 32, 32), dtype=np.float32)
    np.savez(tmp_path / "cal.npz", input=data)
    argv = ["quantize", str(model), "--precision", "int8", "--calibration", str(tmp_path / "cal.npz"), "-q"]
    assert main([*argv, "--out", str(tmp_path / "cnn.int8.onnx")]) in (0, 3)  # 3: not judged on 4 items
    capsys.readouterr()
    assert main(["cache", "list", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)["entries"]
    int8 = [e for e in entries if e["kind"] == "int8 quantized model"]
    assert [e["meta"]["model"] for e in int8] == ["cnn.onnx"]  # not the graph's name


def test_bench_batch_on_a_fixed_axis_says_how_to_go_on(tmp_path, capsys) -> None:
    model = _relu(tmp_path / "fixed.onnx", [1, 4])
    assert main(["bench", model, "--providers", "cpu", "--batch", "1,2", "-q"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--batch 2: the model's batch axis is fixed (x (1, 4))" in err  # the argument and what it met
    assert "give --batch 1 (the model's own batch)" in err  # a way forward here
    assert "dynamic=True" in err and "make_batch_dynamic" in err  # and the way to batch more
