"""The server's defaults derived from the model and the device (issue 38, part 3): the pure rule on fake devices,
flags that win, the child processes' command line, and a served tiny model on the CPU with no flag.

The truth for the rule is the table of docs/serving.md ("Defaults"), written out by hand here; for the device
prediction it is the engine that ``amdinfer.load`` builds on this machine. No timing is asserted.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import amdinfer
from amdinfer.cli import build_parser
from amdinfer.serve._defaults import (
    ACCELERATOR_BUCKETS,
    expected_device,
    model_batch,
    served_defaults,
)
from amdinfer.testing.models import tiny_cnn
from amdinfer.types import TensorSpec

CUDA = ("cuda:0", ["CUDAExecutionProvider", "CPUExecutionProvider"])
ROCM_NATIVE = ("rocm:1", [])  # the MIGraphX backend: no ONNX Runtime provider
MIGRAPHX_EP = ("migraphx:0", ["MIGraphXExecutionProvider"])
CPU = ("cpu", ["CPUExecutionProvider"])


def _values(d):
    return d.max_batch_size, d.batch_buckets, d.max_delay_ms


# ---------------------------------------------------------------- the rule, on fake devices
@pytest.mark.parametrize("device", [CUDA, ROCM_NATIVE, MIGRAPHX_EP], ids=["cuda", "migraphx-native", "migraphx-ep"])
def test_accelerator_with_a_dynamic_batch_axis(device):
    d = served_defaults(*device, "N", cores=16)
    assert _values(d) == (64, (8, 16, 32, 64), 2.0)
    assert d.why["max_batch_size"] == d.why["batch_buckets"] == d.why["max_delay_ms"]
    assert d.why["max_batch_size"].startswith("auto: ") and "dynamic batch axis 'N'" in d.why["max_batch_size"]


def test_the_reason_names_the_provider_or_the_device():
    assert "CUDA EP" in served_defaults(*CUDA, "N", cores=2).why["batch_buckets"]
    assert "MIGraphX EP" in served_defaults(*MIGRAPHX_EP, "N", cores=2).why["batch_buckets"]
    assert "rocm:1" in served_defaults(*ROCM_NATIVE, "N", cores=2).why["batch_buckets"]


def test_cpu_keeps_32_rows_without_buckets():
    assert _values(served_defaults(*CPU, "batch", cores=2)) == (32, (), 2.0)
    assert _values(served_defaults("cpu", [], "N", cores=64)) == (32, (), 2.0)  # the reference backend


@pytest.mark.parametrize("device", [CUDA, CPU], ids=["cuda", "cpu"])
@pytest.mark.parametrize("batch", [1, 8])
def test_fixed_batch_bare_model_gets_its_batch_and_no_buckets(device, batch):
    d = served_defaults(*device, batch, cores=16)
    assert _values(d) == (batch, (), 2.0)
    assert f"fixed batch {batch}" in d.why["max_batch_size"]


def test_fixed_batch_recipe_batches_its_items():
    # the pipeline runs chunks of the fixed batch; its decode threads take the whole batch of items
    assert _values(served_defaults(*CUDA, 1, cores=16, recipe="yolo")) == (64, (), 2.0)
    assert _values(served_defaults(*CPU, 1, cores=2, recipe="yolo")) == (32, (), 2.0)


def test_no_shared_batch_axis_is_one_request_per_call():
    assert _values(served_defaults(*CUDA, None, cores=16)) == (1, (), 2.0)


@pytest.mark.parametrize(
    ("cores", "devices", "workers"), [(1, 1, 1), (2, 1, 1), (4, 1, 2), (16, 1, 4), (128, 1, 4), (12, 2, 3), (8, 8, 1)]
)
def test_processes_per_device(cores, devices, workers):
    assert served_defaults(*CUDA, "N", cores=cores, devices=devices).workers_per_device == workers
    assert served_defaults(*CPU, "N", cores=cores, devices=devices).workers_per_device == workers


def test_decode_threads_all_cores_alone_shared_out_with_several_processes():
    assert served_defaults(*CUDA, "N", cores=2, recipe="classify").pipeline_threads == 2  # 1 process
    assert served_defaults(*CUDA, "N", cores=16, recipe="classify").pipeline_threads == 4  # 4 processes
    assert served_defaults(*CUDA, "N", cores=16, devices=2, recipe="yolo").pipeline_threads == 2  # 2 x 4 processes
    assert served_defaults(*CUDA, "N", cores=16, recipe="yolo", given={"workers_per_device": 1}).pipeline_threads == 16
    assert served_defaults(*CUDA, "N", cores=16).pipeline_threads is None  # a bare model decodes nothing


# ---------------------------------------------------------------- given values win
@pytest.mark.parametrize(
    ("key", "value"),
    [("max_batch_size", 16), ("max_delay_ms", 0.5), ("batch_buckets", (2, 4)), ("workers_per_device", 3)],
)
@pytest.mark.parametrize("device", [CUDA, CPU], ids=["cuda", "cpu"])
def test_a_given_value_wins(device, key, value):
    d = served_defaults(*device, "N", cores=16, given={key: value})
    assert getattr(d, key) == value and d.why[key] == "given"


def test_given_max_batch_cuts_the_automatic_buckets():
    assert served_defaults(*CUDA, "N", cores=2, given={"max_batch_size": 48}).batch_buckets == (8, 16, 32, 48)
    assert served_defaults(*CUDA, "N", cores=2, given={"max_batch_size": 4}).batch_buckets == (4,)
    assert served_defaults(*CUDA, "N", cores=2, given={"max_batch_size": 1}).batch_buckets == ()
    assert served_defaults(*CUDA, "N", cores=2, given={"max_batch_size": 128}).batch_buckets == (8, 16, 32, 64, 128)


def test_given_buckets_set_the_automatic_max_batch():
    assert served_defaults(*CUDA, "N", cores=2, given={"batch_buckets": (4, 12)}).max_batch_size == 12
    d = served_defaults(*CUDA, "N", cores=2, given={"batch_buckets": ()})  # --batch-buckets none
    assert (d.max_batch_size, d.batch_buckets, d.why["batch_buckets"]) == (64, (), "given")
    both = served_defaults(*CUDA, "N", cores=2, given={"batch_buckets": (4, 12), "max_batch_size": 6})
    assert (both.max_batch_size, both.batch_buckets) == (6, (4, 12))


def test_none_is_not_given():
    assert served_defaults(*CUDA, "N", cores=2, given=dict.fromkeys(("max_batch_size", "batch_buckets"))) == (
        served_defaults(*CUDA, "N", cores=2)
    )


def test_the_lines_say_what_and_why():
    d = served_defaults(*CUDA, "N", cores=16, given={"max_delay_ms": 1})
    assert d.batching_line() == (
        "batches of up to 64 rows within 1 ms (--max-delay-ms), buckets 8,16,32,64 (auto: CUDA EP, dynamic batch "
        "axis 'N')"
    )
    everything = {"max_batch_size": 8, "max_delay_ms": 3, "batch_buckets": (8,)}
    assert served_defaults(*CPU, "N", cores=2, given=everything).batching_line() == (
        "batches of up to 8 rows (--max-batch-size) within 3 ms (--max-delay-ms), buckets 8 (--batch-buckets)"
    )
    assert served_defaults(*CUDA, "N", cores=16, recipe="classify").processes_line() == (
        "4 processes/device (auto: 16 cores, 1 device); 4 decode threads each (auto: 16 cores / 4 processes)"
    )
    assert served_defaults(*CPU, "N", cores=2, given={"workers_per_device": 1}).processes_line() == (
        "1 process/device (--workers-per-device)"
    )


# ---------------------------------------------------------------- the model's batch axis, the device predicted
def _spec(name, shape):
    return TensorSpec(name, np.dtype("float32"), shape)


def test_model_batch_from_specs():
    x, y = _spec("x", ("N", 3)), _spec("y", ("N", 10))
    assert model_batch([x], [y]) == "N"
    assert model_batch([_spec("x", (4, 3))], [_spec("y", (4, 10))]) == 4
    assert model_batch([x], [_spec("boxes", ("K", 4))]) is None  # outputs not split by rows
    assert model_batch([x], [_spec("boxes", ("K", 4))], recipe="yolo") == "N"  # the pipeline splits its own
    assert model_batch([], []) is None


def test_model_batch_of_a_loaded_engine():
    with amdinfer.load(tiny_cnn(), providers=["CPUExecutionProvider"]) as engine:
        assert isinstance(model_batch(engine.inputs, engine.outputs), str)


def test_expected_device_is_what_load_gives_here():
    for backend, providers in (("auto", None), ("ort", None), ("auto", ["cpu"])):
        with amdinfer.load(tiny_cnn(), backend=backend, providers=providers) as engine:
            device, names = expected_device(backend, providers)
            assert device == engine.info.device, (backend, providers)
            assert names == engine.info.providers[: len(names)]


def test_expected_device_of_named_providers_and_backends():
    assert expected_device(providers=["cuda"], device=2) == ("cuda:2", ["CUDAExecutionProvider"])
    assert expected_device(providers=["CPUExecutionProvider"]) == ("cpu", ["CPUExecutionProvider"])
    assert expected_device(providers=[("cuda", {"gpu_mem_limit": "1"})]) == ("cuda:0", ["CUDAExecutionProvider"])
    assert expected_device("reference") == ("cpu", [])
    assert expected_device("migraphx", device=1) == ("rocm:1", [])


# ---------------------------------------------------------------- the command line and the child processes
def test_flags_not_given_are_none_and_auto_is_none():
    args = build_parser().parse_args(["serve", "m.onnx"])
    assert (args.max_batch_size, args.max_delay_ms, args.batch_buckets, args.workers_per_device) == (None,) * 4
    auto = ["serve", "m.onnx", "--max-batch-size", "auto", "--max-delay-ms", "auto", "--batch-buckets", "auto"]
    assert (lambda a: (a.max_batch_size, a.max_delay_ms, a.batch_buckets))(build_parser().parse_args(auto)) == (
        None,
        None,
        None,
    )
    assert build_parser().parse_args(["serve", "m.onnx", "--batch-buckets", "none"]).batch_buckets == ()


@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--max-batch-size", "48"],
        ["--max-delay-ms", "0.5", "--batch-buckets", "4,8"],
        ["--batch-buckets", "none"],
        ["--max-batch-size", "8", "--max-delay-ms", "3", "--batch-buckets", "8", "--providers", "cpu"],
    ],
)
def test_child_argv_round_trips(flags):
    from amdinfer.serve._cli import _child_argv

    parser = build_parser()
    args = parser.parse_args(["serve", "m.onnx", "--devices", "0,1", *flags])
    child = parser.parse_args(_child_argv(args, 1, 2))
    keys = ("max_batch_size", "max_delay_ms", "batch_buckets", "providers", "precision", "backend", "model")
    assert {k: getattr(child, k) for k in keys} == {k: getattr(args, k) for k in keys}
    assert child.devices == [1] and child.workers_per_device == 1 and child.reuse_port
    again = parser.parse_args(_child_argv(child, 1, 2))  # a child's own argv is the same again
    assert {k: getattr(again, k) for k in keys} == {k: getattr(child, k) for k in keys}


def test_child_argv_resolves_the_decode_threads_for_the_host():
    from amdinfer.serve._cli import _child_argv, _recipe_options

    parser = build_parser()
    args = parser.parse_args(["serve", "m.onnx", "--recipe", "classify", "--workers-per-device", "2"])
    threads = _recipe_options(parser.parse_args(_child_argv(args, 0, 4)))["pipeline_threads"]
    from amdinfer.pipeline._executor import default_threads

    assert threads == max(2, default_threads() // 4)


def test_processes_note_of_the_command_line():
    from amdinfer.pipeline._executor import default_threads
    from amdinfer.serve._cli import _processes_note

    cores = default_threads()
    note = _processes_note(build_parser().parse_args(["serve", "m.onnx"]), 1)
    assert note == f"1 process/device (auto: {cores} cores, 1 device)"
    recipe = _processes_note(build_parser().parse_args(["serve", "m.onnx", "--recipe", "classify"]), 1)
    assert recipe == f"{note}; {cores} decode threads (auto: all {cores} cores)"
    single = _processes_note(build_parser().parse_args(["serve", "m.onnx", "--single-process"]), 1)
    assert single == "1 process/device (--single-process)"


# ---------------------------------------------------------------- the prediction checked after load
# KServe is not imported in the test process: its gRPC protos and tritonclient's register the same names
# ("inference.*"), so what imports it runs in a child process.
def _python(code: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.splitlines()


_LOAD = """if True:
    import logging, sys
    from amdinfer.serve import _models, _serve_api
    from amdinfer.testing.models import tiny_cnn
    CUDA = ("cuda:0", ["CUDAExecutionProvider", "CPUExecutionProvider"])
    _serve_api.expected_device = lambda *a: CUDA
    given = dict.fromkeys(("max_batch_size", "max_delay_ms", "batch_buckets", "pipeline_threads"))
    load = {"devices": [0], "backend": "auto", "precision": "fp32", "providers": ["cpu"]}
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="log %(message)s")
"""


def test_a_wrong_prediction_is_loaded_again_with_the_devices_buckets():
    """An accelerator predicted (an accelerator runtime installed, say) but the engine on the CPU: loaded again
    without the accelerator's buckets."""
    lines = _python(
        _LOAD
        + """
    target, _, chosen = _serve_api._served_target(tiny_cnn(), None, None, 0.0, "ort", given, **load)
    why = chosen.why["batch_buckets"]
    print([w.engine.batch_buckets for w in target], chosen.max_batch_size, chosen.batch_buckets, why)
    """
    )
    assert "log expected buckets 8,16,32,64, but the engine runs on CPU EP, dynamic batch axis 'N': loading again " \
        "with none" in lines  # fmt: skip
    assert lines[-1] == "[()] 32 () auto: CPU EP, dynamic batch axis 'N'"


def test_a_right_prediction_loads_once_with_the_buckets():
    """The accelerator's buckets reach the engine at load when the engine lands where predicted (faked: the rule
    is told the CPU engine is the accelerator predicted)."""
    lines = _python(
        _LOAD
        + """
    real = _models.served_defaults
    _models.served_defaults = lambda device, providers, *a, **k: real(*CUDA, *a, **k)
    target, _, chosen = _serve_api._served_target(tiny_cnn(), None, None, 0.0, "ort", given, **load)
    print([w.engine.batch_buckets for w in target], chosen.max_batch_size, chosen.batch_buckets)
    """
    )
    assert not any(line.startswith("log expected buckets") for line in lines), lines
    assert lines[-1] == f"[{ACCELERATOR_BUCKETS}] 64 {ACCELERATOR_BUCKETS}"


def test_build_model_without_values_takes_the_rule_and_the_engines_buckets():
    lines = _python(
        """if True:
        import amdinfer
        from amdinfer.serve import build_model
        from amdinfer.testing.models import tiny_cnn
        engine = amdinfer.load(tiny_cnn(), providers=["CPUExecutionProvider"], batch_buckets=[2, 4])
        m = build_model("tiny", engine)
        print(m.batcher.max_batch_size, m.batcher.max_delay * 1000)
        print(m.batcher.chosen)
        print(build_model("tiny", engine, max_batch_size=8, max_delay_ms=1).batcher.chosen)
    """
    )
    assert lines == [
        "4 2.0",  # the largest of the engine's buckets
        "batches of up to 4 rows within 2 ms, buckets 2,4 (the engine's) (auto: CPU EP, dynamic batch axis 'N')",
        "None",
    ]


# ---------------------------------------------------------------- served on the CPU, no flag
needs_serve = pytest.mark.skipif(importlib.util.find_spec("kserve") is None, reason="needs the serve extra")


def _fixed_batch_model(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "fixed", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _start_line(log: str) -> str:
    lines = [line for line in log.splitlines() if "amdinfer.serve: serving" in line]
    assert len(lines) == 1, log
    return lines[0]


@needs_serve
@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], r"batches of up to 32 rows within 2 ms, no buckets \(auto: CPU EP, dynamic batch axis '\w+'\), "
             r"warmed up at \[1, 32\]"),
        (["--max-batch-size", "8", "--batch-buckets", "4,8"],
         r"batches of up to 8 rows \(--max-batch-size\) within 2 ms, buckets 4,8 \(--batch-buckets\) \(auto: CPU EP, "
         r"dynamic batch axis '\w+'\), warmed up at \[4, 8\]"),
    ],
    ids=["no-flags", "given"],
)  # fmt: skip
def test_served_tiny_model_on_the_cpu_says_what_it_chose(tiny_path, tmp_path, flags, expected):
    from .conftest import free_port, running_server

    http, grpc = free_port(), free_port()
    argv = ["-m", "amdinfer", "serve", str(tiny_path), "--name", "tiny", "--http-port", str(http)]
    argv += ["--grpc-port", str(grpc), *flags]
    with running_server(argv, http, grpc, tmp_path / "log.txt") as s:
        assert s.stop() == 0
    line = _start_line(s.log.read_text())
    assert re.search(expected, line), line
    assert "model 'tiny' on ort (CPUExecutionProvider)" in line
    assert re.search(r"; \d+ process(es)?/device \(auto: \d+ cores, 1 device\); REST", line), line


@needs_serve
def test_served_fixed_batch_model_one_request_per_call(tmp_path):
    from .conftest import free_port, running_server

    path = _fixed_batch_model(tmp_path / "fixed.onnx")
    http, grpc = free_port(), free_port()
    argv = ["-m", "amdinfer", "serve", str(path), "--providers", "cpu", "--http-port", str(http), "--grpc-port"]
    argv += [str(grpc), "--workers-per-device", "1"]
    with running_server(argv, http, grpc, tmp_path / "log.txt") as s:
        assert s.stop() == 0
    line = _start_line(s.log.read_text())
    assert "one request per engine call (input 'x': axis 0 is 1" in line, line
    assert "; 1 process/device (--workers-per-device); REST" in line, line
