"""The numerical canary (`--verify-sample`): a sample of served requests re-run on a reference engine.

Servers run in subprocesses on loopback and are driven by tritonclient over REST and gRPC; the canary's
counters and histograms are read from `/metrics`, its warnings from the server's log. The queue and the
sampling draw are checked in-process on a `Canary` alone.
"""

from __future__ import annotations

import importlib.util
import random
import re
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

# KServe is not imported here: its gRPC protos and tritonclient's register the same names (see test_serve.py).
if importlib.util.find_spec("kserve") is None:
    pytest.skip("needs the serve extra: run `nox -s serve`", allow_module_level=True)
grpcclient = pytest.importorskip("tritonclient.grpc", reason="needs tritonclient[grpc]: run `nox -s serve`")
httpclient = pytest.importorskip("tritonclient.http", reason="needs tritonclient[http]: run `nox -s serve`")

from prometheus_client import REGISTRY  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

import amdinfer  # noqa: E402
from amdinfer.errors import OptionError  # noqa: E402
from amdinfer.serve import Canary, load_reference  # noqa: E402
from amdinfer.testing.models import tiny_cnn  # noqa: E402

from .conftest import RunningServer, free_port, running_server  # noqa: E402

SHIFT = 0.5  # added to fc.bias[0] of the served model: logits[:, 0] move by exactly this much


def _metrics(server: RunningServer) -> dict[str, float]:
    """The canary's samples of model 'tiny', keyed ``name`` or ``name{le=...}`` for histogram buckets."""
    with urllib.request.urlopen(f"http://{server.http}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("amdinfer_canary_") and s.labels.get("model") == "tiny":
                key = s.name + (f"{{le={float(s.labels['le']):g}}}" if "le" in s.labels else "")
                out[key] = s.value
    return out


def _settled(server: RunningServer, sampled: int, timeout: float = 60) -> dict[str, float]:
    """The canary's metrics once ``sampled`` requests were drawn and each was compared, dropped or failed."""
    deadline = time.monotonic() + timeout
    while True:
        m = _metrics(server)
        done = sum(m.get(f"amdinfer_canary_{e}_total", 0) for e in ("compared", "dropped", "failed"))
        if m.get("amdinfer_canary_sampled_total") == sampled and done == sampled:
            return m
        assert time.monotonic() < deadline, f"canary did not settle on {sampled} samples: {m}"
        time.sleep(0.1)


def _x(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((rows, 3, 32, 32), dtype=np.float32)


def _http_input(x: np.ndarray):
    inp = httpclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=True)
    return inp


def _grpc_input(x: np.ndarray):
    inp = grpcclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return inp


def _concurrent_requests(server: RunningServer, count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``count`` requests of 1-3 rows each, from 8 threads at once (so that they share engine calls)."""

    def one(i: int) -> tuple[np.ndarray, np.ndarray]:
        x = _x(1 + i % 3, seed=100 + i)
        if i % 2:
            result = httpclient.InferenceServerClient(server.http).infer("tiny", [_http_input(x)])
        else:
            result = grpcclient.InferenceServerClient(server.grpc).infer("tiny", [_grpc_input(x)])
        return x, result.as_numpy("logits")

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, range(count)))


# ---------------------------------------------------------------------------------------------------------------
# A correct engine: zero over tolerance at a sample rate of 1.0


@pytest.fixture(scope="module", params=["ort", "numpy"])
def correct_server(request, tiny_path: Path, tmp_path_factory: pytest.TempPathFactory):
    http, grpc = free_port(), free_port()
    argv = ["-m", "amdinfer", "serve", str(tiny_path), "--name", "tiny", "--providers", "cpu"]
    argv += ["--http-port", str(http), "--grpc-port", str(grpc), "--max-batch-size", "16", "--max-delay-ms", "20"]
    argv += ["--verify-sample", "1.0", "--verify-reference", request.param]
    log = tmp_path_factory.mktemp("canary") / f"{request.param}.log"
    with running_server(argv, http, grpc, log) as s:
        yield request.param, s
        assert s.stop() == 0, log.read_text()


def test_correct_engine_every_request_compared_none_over_tolerance(correct_server, tiny_path: Path):
    reference, server = correct_server
    answers = _concurrent_requests(server, 24)
    m = _settled(server, 24)
    assert m["amdinfer_canary_compared_total"] == 24
    assert m.get("amdinfer_canary_over_tolerance_total", 0) == 0
    assert m.get("amdinfer_canary_dropped_total", 0) == 0
    assert m.get("amdinfer_canary_failed_total", 0) == 0
    # every comparison observed, each well inside fp32's atol 1e-3 (ORT vs ORT or NumPy: float32 rounding)
    assert m["amdinfer_canary_max_abs_error_count"] == 24
    assert m["amdinfer_canary_max_abs_error_bucket{le=0.0001}"] == 24
    assert m["amdinfer_canary_top1_agreement_bucket{le=0.99}"] == 0  # (N, 10) logits: every arg-max agrees
    assert m["amdinfer_canary_top1_agreement_count"] == 24
    log = server.log.read_text()
    assert f"canary re-runs 100.00% of requests on {'reference' if reference == 'numpy' else 'ort'}" in log
    assert "over the" not in log
    # the answers themselves are the engine's (the canary only watches)
    engine = amdinfer.load(tiny_path, providers=["cpu"])
    for x, y in answers:
        np.testing.assert_allclose(y, engine.run(x)["logits"], rtol=1e-5, atol=1e-6)
    engine.close()


# ---------------------------------------------------------------------------------------------------------------
# A wrong engine: its model's weights differ from the reference's

WRONG_SERVER = textwrap.dedent(
    """
    import logging
    import sys
    import amdinfer
    import onnx
    from amdinfer.serve import serve

    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")

    original, altered, http, grpc = onnx.load(sys.argv[1]), onnx.load(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    served = amdinfer.load(altered, providers=["cpu"])
    reference = amdinfer.load(original, providers=["cpu"], precision="fp32")
    serve(served, name="tiny", http_port=http, grpc_port=grpc, max_delay_ms=20, verify_sample=1.0,
          verify_reference=reference)
    """
)


def _altered(original: onnx.ModelProto) -> onnx.ModelProto:
    model = onnx.ModelProto()
    model.CopyFrom(original)
    for i, init in enumerate(model.graph.initializer):
        if init.name == "fc.bias":
            bias = numpy_helper.to_array(init).copy()
            bias[0] += SHIFT
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(bias, init.name))
            return model
    raise AssertionError("tiny_cnn has no fc.bias")


@pytest.fixture(scope="module")
def wrong_server(tiny_path: Path, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("wrong")
    altered = folder / "altered.onnx"
    onnx.save(_altered(onnx.load(tiny_path)), altered)
    script = folder / "serve_wrong.py"
    script.write_text(WRONG_SERVER)
    http, grpc = free_port(), free_port()
    argv = [str(script), str(tiny_path), str(altered), str(http), str(grpc)]
    with running_server(argv, http, grpc, folder / "log.txt") as s:
        yield s
        assert s.stop() == 0, (folder / "log.txt").read_text()


def test_wrong_engine_is_caught_counted_and_logged_with_the_request_id(wrong_server, tiny_path: Path):
    x = _x(2, seed=7)
    http = httpclient.InferenceServerClient(wrong_server.http)
    named = http.infer("tiny", [_http_input(x)], request_id="req-bad-7")
    unnamed = http.infer("tiny", [_http_input(x)])
    by_grpc = grpcclient.InferenceServerClient(wrong_server.grpc).infer("tiny", [_grpc_input(x)], request_id="g-9")
    m = _settled(wrong_server, 3)
    assert m["amdinfer_canary_compared_total"] == 3
    assert m["amdinfer_canary_over_tolerance_total"] == 3
    # the served answers are the altered model's: logits[:, 0] off by SHIFT, the rest equal
    engine = amdinfer.load(tiny_path, providers=["cpu"])
    diff = named.as_numpy("logits") - engine.run(x)["logits"]
    engine.close()
    np.testing.assert_allclose(diff[:, 0], SHIFT, atol=1e-5)
    np.testing.assert_allclose(diff[:, 1:], 0, atol=1e-5)
    # ... and the canary measured that divergence: max_abs = SHIFT for each, in the (0.1, 1] bucket
    assert m["amdinfer_canary_max_abs_error_sum"] == pytest.approx(3 * SHIFT, abs=1e-4)
    assert m["amdinfer_canary_max_abs_error_bucket{le=1}"] - m["amdinfer_canary_max_abs_error_bucket{le=0.1}"] == 3
    # one WARNING line per request, naming it (a request without an id: the one its response carries)
    log = wrong_server.log.read_text()
    warnings = [line for line in log.splitlines() if "WARNING amdinfer.serve: canary:" in line]
    assert len(warnings) == 3, log
    generated = unnamed.get_response()["id"]
    assert generated
    for rid in ("req-bad-7", generated, "g-9"):
        (line,) = [w for w in warnings if f"request {rid}:" in w]
        assert "model 'tiny'" in line and "outputs ['logits'] over the fp32 tolerance" in line, line
        assert "against the ort reference; worst logits (2, 10): FAILED" in line, line
        assert re.search(r"max_abs 5\.00\de-01", line), line
    assert by_grpc.get_response().id == "g-9"


# ---------------------------------------------------------------------------------------------------------------
# The flag, the queue, the draw


@pytest.mark.parametrize("rate", ["1.5", "-0.1", "nan", "often"])
def test_cli_refuses_a_rate_outside_0_1(rate: str, tiny_path: Path):
    cmd = [sys.executable, "-m", "amdinfer", "serve", str(tiny_path), "--verify-sample", rate]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"--verify-sample: got {rate!r}, expected a finite number in 0..1 (a fraction of requests)" in proc.stderr


@pytest.mark.parametrize("rate", [1.01, -1, float("nan"), "0.5", True])
def test_canary_refuses_a_rate_outside_0_1(rate):
    ref = load_reference(tiny_cnn(), "numpy")
    with pytest.raises(OptionError, match=r"verify_sample: got .*, expected a fraction in \[0, 1\]"):
        Canary(ref, rate=rate)
    ref.close()


def test_unknown_reference_is_refused():
    with pytest.raises(OptionError, match=r"verify_reference: got 'gpu', expected one of \['ort', 'numpy'\]"):
        load_reference(tiny_cnn(), "gpu")


def test_full_queue_drops_and_counts_without_blocking():
    ref = load_reference(tiny_cnn(), "numpy")
    entered, release = threading.Event(), threading.Event()
    real_run = ref.run

    def slow_run(*args, **kwargs):
        entered.set()
        release.wait(60)
        return real_run(*args, **kwargs)

    ref.run = slow_run  # type: ignore[method-assign]
    canary = Canary(ref, rate=1.0, model="canary-queue", queue_size=2)
    canary.start()
    x = np.ones((1, 3, 32, 32), np.float32)
    y = {"logits": real_run(x)["logits"]}
    assert canary.offer({"input": x}, y, "r0")
    assert entered.wait(60)  # the thread holds r0 in the reference; the queue has room for 2 more
    offered = [canary.offer({"input": x}, y, f"r{i}") for i in range(1, 5)]
    assert offered == [True, True, False, False]
    assert canary.counts["dropped"] == 2
    release.set()
    canary.flush()
    assert canary.counts == {"sampled": 5, "compared": 3, "over_tolerance": 0, "dropped": 2, "failed": 0}
    assert REGISTRY.get_sample_value("amdinfer_canary_dropped_total", {"model": "canary-queue", "version": ""}) == 2
    canary.close()
    assert ref.closed


def test_sample_keeps_its_own_copy_of_the_buffers():
    """A client may reuse its (shared-memory) buffers once answered: the canary compares what was served."""
    ref = load_reference(tiny_cnn(), "numpy")
    canary = Canary(ref, rate=1.0, model="canary-copy")
    x = np.ones((1, 3, 32, 32), np.float32)
    y = ref.run(x)["logits"]
    canary.start()
    canary.offer({"input": x}, {"logits": y})
    x[:] = 5.0  # overwritten after the answer left
    y[:] = 0.0
    canary.flush()
    assert canary.counts["compared"] == 1 and canary.counts["over_tolerance"] == 0
    canary.close()


def test_rate_draws_that_fraction_of_requests():
    ref = load_reference(tiny_cnn(), "numpy")
    canary = Canary(ref, rate=0.25, model="canary-rate", seed=11)
    canary.start()
    x = np.ones((1, 3, 32, 32), np.float32)
    y = ref.run(x)
    taken = sum(canary.offer({"input": x}, y) for _ in range(200))
    draw = random.Random(11)
    assert taken == sum(draw.random() < 0.25 for _ in range(200))
    canary.flush()
    assert canary.counts["sampled"] == canary.counts["compared"] == taken
    canary.close()


def test_a_failing_reference_is_counted_and_logged(caplog):
    ref = load_reference(tiny_cnn(), "numpy")
    canary = Canary(ref, rate=1.0, model="canary-fail")
    canary.start()
    x = np.ones((1, 3, 32, 32), np.float32)
    with caplog.at_level("WARNING", logger="amdinfer.serve"):
        canary.offer({"input": x}, {"probabilities": np.zeros((1, 10), np.float32)}, "r-odd")
        canary.flush()
    assert canary.counts["failed"] == 1 and canary.counts["compared"] == 0
    assert "request r-odd: the reference could not check it" in caplog.text
    canary.close()
