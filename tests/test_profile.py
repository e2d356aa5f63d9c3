"""amdinfer.profile: per-node timings from ONNX Runtime's profiler."""

from __future__ import annotations

import pytest

import amdinfer
from amdinfer.profile import NodeTiming, ProfileReport, profile
from amdinfer.testing import models


def test_profile_lists_every_kernel_of_the_optimized_graph() -> None:
    model = models.tiny_cnn()
    engine = amdinfer.load(model, providers=["cpu"], graph_optimization="disable")
    report = profile(engine, models.random_inputs(model), runs=2, warmup=1)
    # With optimizations off, ONNX Runtime runs exactly the graph's nodes.
    assert sorted(n.name for n in report.nodes) == sorted(n.name for n in model.graph.node)
    assert {n.op_type for n in report.nodes} == {n.op_type for n in model.graph.node}
    assert all(n.calls == 2 and n.provider == "CPUExecutionProvider" for n in report.nodes)
    assert report.cpu_nodes == []  # a CPU-only session has nothing that "left the GPU"
    assert abs(sum(r.share for r in report.by_op()) - 1.0) < 1e-9


def test_cpu_nodes_are_those_off_the_gpu_provider() -> None:
    nodes = [
        NodeTiming("conv", "Conv", "MIGraphXExecutionProvider", 10.0, 1),
        NodeTiming("nms", "NonMaxSuppression", "CPUExecutionProvider", 50.0, 1),
    ]
    report = ProfileReport(nodes, ["MIGraphXExecutionProvider", "CPUExecutionProvider"], 1)
    assert [n.name for n in report.cpu_nodes] == ["nms"]
    assert "ran on the CPU: nms (NonMaxSuppression)" in repr(report)


def test_profile_checks_feeds_like_run() -> None:
    engine = amdinfer.load(models.tiny_cnn(), providers=["cpu"])
    with pytest.raises(amdinfer.InputError, match="input 'input'"):
        profile(engine, {"input": models.random_inputs(models.tiny_cnn())["input"][0]})


def test_profile_needs_an_ort_engine() -> None:
    class Fake:
        info = amdinfer.EngineInfo(backend="reference")

    with pytest.raises(amdinfer.OptionError, match="expected an ONNX Runtime engine"):
        profile(Fake(), {})  # type: ignore[arg-type]
