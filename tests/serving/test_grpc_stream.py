"""Triton's ``ModelStreamInfer`` (amdinfer.serve._stream), driven by tritonclient's stream API
(``start_stream`` / ``async_stream_infer`` / ``stop_stream``) and by Triton's own proto (tritonclient's
``service_pb2``) for the wire fields tritonclient's callback does not show.

The truth: ``engine.run`` and the recipe run in this process, and the unary ``infer`` of the same server on
the same inputs; for errors, the message the unary call gets. Answers come back in the order sent (Triton's
rule for models that are not decoupled), so the callbacks are matched to the requests by position and by id.
"""

from __future__ import annotations

import importlib.util
import io
import queue
import secrets
import textwrap
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# KServe is not imported here (its protos and tritonclient's share names in protobuf's default pool)
if importlib.util.find_spec("kserve") is None:
    pytest.skip("needs the serve extra: run `nox -s serve`", allow_module_level=True)
grpcclient = pytest.importorskip("tritonclient.grpc", reason="needs tritonclient[grpc]: run `nox -s serve`")

import grpc  # noqa: E402
import tritonclient.utils.shared_memory as shm  # noqa: E402
from PIL import Image  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from tritonclient.grpc import service_pb2, service_pb2_grpc  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

from .conftest import RunningServer, bytes_input, free_port, running_server  # noqa: E402

RECIPE = textwrap.dedent(
    """
    import amdinfer
    from amdinfer.testing.models import tiny_cnn

    def classifier():
        labels = [f"class {i}" for i in range(10)]
        return amdinfer.classify(tiny_cnn(seed=4), size=32, crop=32, topk=3, labels=labels, fuse=True,
                                 providers=["CPUExecutionProvider"], decoder="pillow", keep_image=False)
    """
)
SERVER = RECIPE + textwrap.dedent(
    """
    import sys
    from amdinfer.serve import PipelineWorker, Server, build_model
    from amdinfer.serve._cli import configure_logging

    configure_logging("info")  # as `amdinfer serve` logs: a refused request in one line
    tiny, http, grpc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    models = [
        build_model("tiny", amdinfer.load(tiny, providers=["CPUExecutionProvider"]), max_batch_size=16,
                    max_delay_ms=50),
        build_model("cls", PipelineWorker(classifier()), max_batch_size=8, max_delay_ms=50),
    ]
    Server(http_port=http, grpc_port=grpc).start(models)
    """
)


@pytest.fixture(scope="module")
def server(tiny_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    folder = tmp_path_factory.mktemp("stream")
    script = folder / "serve_stream.py"
    script.write_text(SERVER)
    http, grpc_port = free_port(), free_port()
    root = Path(__file__).resolve().parents[2]
    argv = ["-c", f"import sys; sys.path.insert(0, {str(root)!r}); exec(open({str(script)!r}).read())"]
    with running_server([*argv, str(tiny_path), str(http), str(grpc_port)], http, grpc_port, folder / "log") as s:
        yield s
        assert s.stop() == 0, s.log.read_text()
        log = s.log.read_text()
        # refused streamed requests are one INFO line each, as unary ones; no traceback (a cancelled stream too)
        assert "INVALID_ARGUMENT ModelStreamInfer: input 'input': got shape" in log
        assert "NOT_FOUND ModelStreamInfer:" in log and "Traceback" not in log, log


@pytest.fixture(scope="module")
def recipe() -> Iterator[Any]:
    space: dict[str, Any] = {}
    exec(RECIPE, space)
    pipe = space["classifier"]()
    yield pipe
    pipe.close()


def _x(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((rows, 3, 32, 32), dtype=np.float32)


def _input(x: np.ndarray, datatype: str = "FP32") -> Any:
    inp = grpcclient.InferInput("input", list(x.shape), datatype)
    inp.set_data_from_numpy(x)
    return inp


def _stream(
    server: RunningServer, calls: list[tuple[str, list[Any], str]], outputs: list[Any] | None = None, **kwargs: Any
) -> list[tuple[Any, Any]]:
    """Send ``(model, inputs, id)`` calls on one stream (call ``i`` asking for ``outputs[i]`` when given); the
    ``(result, error)`` of each callback, in order."""
    got: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc)
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    try:
        for i, (model, inputs, request_id) in enumerate(calls):
            asked = {"outputs": [outputs[i]]} if outputs else {}
            client.async_stream_infer(model, inputs, request_id=request_id, **asked, **kwargs)
    finally:
        client.stop_stream()  # half-closes the stream and waits for every answer
        client.close()
    return [got.get_nowait() for _ in range(got.qsize())]


def _unary_error(server: RunningServer, model: str, inputs: list[Any]) -> str:
    with pytest.raises(InferenceServerException) as info:
        grpcclient.InferenceServerClient(server.grpc).infer(model, inputs)
    return str(info.value.message())


def _metrics(server: RunningServer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://{server.http}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _sample(values: dict, name: str, model: str, **labels: str) -> float:
    """Summed samples of ``name`` for ``model`` (its label is ``model`` or ``model_name``)."""
    return sum(
        v
        for (n, ls), v in values.items()
        if n == name
        and (("model", model) in ls or ("model_name", model) in ls)
        and all((k, labels[k]) in ls for k in labels)
    )


def _changed(server: RunningServer, before: dict) -> dict:
    after = _metrics(server)
    return {key: after.get(key, 0.0) - before.get(key, 0.0) for key in before.keys() | after.keys()}


class TestAnswers:
    def test_every_id_gets_the_unary_and_the_engines_answer_in_the_order_sent(self, server, engine):
        inputs = [_x(1 + i % 3, seed=i) for i in range(12)]
        ids = [f"s-{i}" for i in range(12)]
        got = _stream(server, [("tiny", [_input(x)], i) for x, i in zip(inputs, ids)])
        assert [e for _, e in got] == [None] * 12
        assert [r.get_response().id for r, _ in got] == ids
        unary = grpcclient.InferenceServerClient(server.grpc)
        for (result, _), x in zip(got, inputs):
            want = engine.run(x)["logits"]
            np.testing.assert_allclose(result.as_numpy("logits"), want, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(
                result.as_numpy("logits"), unary.infer("tiny", [_input(x)]).as_numpy("logits"), rtol=1e-5, atol=1e-6
            )

    def test_requests_of_one_stream_are_in_flight_together_and_batch(self, server, engine):
        """32 one-row requests sent at once, batch window 50 ms: they go through the batcher as unary calls
        do (each counted once, every row in one engine call), and some engine calls carry several of them."""
        before = _metrics(server)
        inputs = [_x(1, seed=100 + i) for i in range(32)]
        got = _stream(server, [("tiny", [_input(x)], f"b-{i}") for i, x in enumerate(inputs)])
        assert [e for _, e in got] == [None] * 32
        for (result, _), x in zip(got, inputs):
            np.testing.assert_allclose(result.as_numpy("logits"), engine.run(x)["logits"], rtol=1e-5, atol=1e-6)
        changed = _changed(server, before)
        assert _sample(changed, "amdinfer_requests_total", "tiny", outcome="ok") == 32
        assert _sample(changed, "amdinfer_batch_size_sum", "tiny") == 32
        assert _sample(changed, "amdinfer_batch_size_count", "tiny") < 32

    def test_more_requests_than_the_in_flight_bound_are_all_answered(self, server, engine):
        """300 requests, past the 256 a stream may have read and not answered: the server stops reading
        until answers are written, and every request is answered, in order."""
        x = _x(1, seed=8)
        got = _stream(server, [("tiny", [_input(x)], f"n-{i}") for i in range(300)])
        assert [(r.get_response().id, e) for r, e in got] == [(f"n-{i}", None) for i in range(300)]
        want = engine.run(x)["logits"]
        for result, _ in got:
            np.testing.assert_allclose(result.as_numpy("logits"), want, rtol=1e-5, atol=1e-6)

    def test_a_cancelled_stream_leaves_the_server_serving(self, server, engine):
        client = grpcclient.InferenceServerClient(server.grpc)
        client.start_stream(callback=lambda result, error: None)
        for i in range(20):
            client.async_stream_infer("tiny", [_input(_x(2, seed=i))], request_id=f"x-{i}")
        client.stop_stream(cancel_requests=True)  # the client goes away with requests in flight
        client.close()
        x = _x(2, seed=9)
        got = _stream(server, [("tiny", [_input(x)], "after")])
        assert got[0][1] is None and got[0][0].get_response().id == "after"
        np.testing.assert_allclose(got[0][0].as_numpy("logits"), engine.run(x)["logits"], rtol=1e-5, atol=1e-6)
        unary = grpcclient.InferenceServerClient(server.grpc).infer("tiny", [_input(x)])
        np.testing.assert_allclose(unary.as_numpy("logits"), engine.run(x)["logits"], rtol=1e-5, atol=1e-6)

    def test_empty_final_response_option_is_taken_and_every_answer_is_final(self, server, engine):
        x = _x(2, seed=7)
        got = _stream(server, [("tiny", [_input(x)], "f-1")], enable_empty_final_response=True)
        ((result, error),) = got
        assert error is None
        np.testing.assert_allclose(result.as_numpy("logits"), engine.run(x)["logits"], rtol=1e-5, atol=1e-6)
        assert result.get_response().parameters["triton_final_response"].bool_param is True

    def test_shared_memory_inputs_and_outputs(self, server, engine):
        tag = secrets.token_hex(4)
        client = grpcclient.InferenceServerClient(server.grpc)
        inputs = [_x(1 + i, seed=20 + i) for i in range(3)]
        handles, calls, outputs = [], [], []
        try:
            for i, x in enumerate(inputs):
                for kind, size in (("in", x.nbytes), ("out", x.shape[0] * 10 * 4)):
                    name = f"{tag}-{kind}{i}"
                    handles.append(shm.create_shared_memory_region(name, f"/amdinfer-test-{name}", size))
                    client.register_system_shared_memory(name, f"/amdinfer-test-{name}", size)
                shm.set_shared_memory_region(handles[-2], [x])
                inp = grpcclient.InferInput("input", list(x.shape), "FP32")
                inp.set_shared_memory(f"{tag}-in{i}", x.nbytes)
                out = grpcclient.InferRequestedOutput("logits")
                out.set_shared_memory(f"{tag}-out{i}", x.shape[0] * 40)
                calls.append(("tiny", [inp], f"m-{i}"))
                outputs.append(out)
            got = _stream(server, calls, outputs)
            assert [(r.get_response().id, e) for r, e in got] == [("m-0", None), ("m-1", None), ("m-2", None)]
            for i, x in enumerate(inputs):
                logits = shm.get_contents_as_numpy(handles[2 * i + 1], np.float32, [x.shape[0], 10])
                np.testing.assert_allclose(logits, engine.run(x)["logits"], rtol=1e-5, atol=1e-6)
        finally:
            client.unregister_system_shared_memory()
            for handle in handles:
                shm.destroy_shared_memory_region(handle)


BAD = {
    "shape": lambda: ("tiny", [_input(_x(1, seed=0)[:, :2])]),
    "dtype": lambda: ("tiny", [_input(_x(1, seed=0).astype(np.float64), "FP64")]),
    "unknown model": lambda: ("nope", [_input(_x(1, seed=0))]),
    "unknown datatype": lambda: ("tiny", [_bad_datatype()]),
}


def _bad_datatype() -> Any:
    inp = _input(_x(1, seed=0))
    inp._input.datatype = "FP8"  # what a client of another protocol version could send
    return inp


class TestErrors:
    @pytest.mark.parametrize("what", sorted(BAD))
    def test_a_bad_request_fails_alone_with_the_unary_message(self, server, engine, what):
        inputs = [_x(2, seed=30 + i) for i in range(7)]
        calls = [("tiny", [_input(x)], f"e-{i}") for i, x in enumerate(inputs)]
        model, bad = BAD[what]()
        calls[3] = (model, bad, "e-3")
        got = _stream(server, calls)
        assert len(got) == 7
        result, error = got[3]
        assert result is None and isinstance(error, InferenceServerException)
        model, bad = BAD[what]()
        assert error.message() == _unary_error(server, model, bad)
        for i in (0, 1, 2, 4, 5, 6):
            result, error = got[i]
            assert error is None and result.get_response().id == f"e-{i}"
            np.testing.assert_allclose(result.as_numpy("logits"), engine.run(inputs[i])["logits"], rtol=1e-5, atol=1e-6)

    def test_an_error_answer_carries_its_request_id_on_the_wire(self, server):
        """Triton's proto (tritonclient's service_pb2): an error answer's infer_response holds the request's
        id, model name and version and no outputs; the answers keep the order of the requests."""
        good = _x(1, seed=40)
        requests = []
        for i, model in enumerate(["tiny", "nope", "tiny"]):
            r = service_pb2.ModelInferRequest(model_name=model, id=f"w-{i}")
            r.inputs.add(name="input", datatype="FP32", shape=list(good.shape))
            r.raw_input_contents.append(good.tobytes())
            requests.append(r)
        with grpc.insecure_channel(server.grpc) as channel:
            answers = list(service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(iter(requests)))
        assert [a.infer_response.id for a in answers] == ["w-0", "w-1", "w-2"]
        assert [bool(a.error_message) for a in answers] == [False, True, False]
        failed = answers[1].infer_response
        assert failed.model_name == "nope" and len(failed.outputs) == 0 and len(failed.raw_output_contents) == 0
        assert "nope" in answers[1].error_message
        assert all(a.infer_response.parameters["triton_final_response"].bool_param for a in answers[::2])

    def test_failures_are_counted_as_unary_failures_are(self, server):
        before = _metrics(server)
        got = _stream(server, [("tiny", [_input(_x(1, seed=0)[:, :2])], "c-0"), ("tiny", [_input(_x(1, 1))], "c-1")])
        assert [e is None for _, e in got] == [False, True]
        changed = _changed(server, before)
        assert _sample(changed, "amdinfer_requests_total", "tiny", outcome="invalid") == 1
        assert _sample(changed, "amdinfer_requests_total", "tiny", outcome="ok") == 1


def _picture(seed: int, fmt: str) -> bytes:
    rng = np.random.default_rng(seed)
    img = rng.integers(0, 255, (40 + seed, 48, 3), dtype=np.uint8)
    img[8:24, 8:30] = rng.integers(0, 255, 3)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, fmt)
    return buf.getvalue()


def _decode(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


class TestRecipe:
    def test_images_stream_to_a_recipe_and_a_bad_image_fails_alone(self, server, recipe):
        """Encoded images, one per request, batched together: each answer equals the local recipe and the
        unary call; a request with bytes that are no image (it fails inside the batch: the batch is retried
        item by item) gets the unary message, the others their answers."""
        files = [_picture(i, "PNG" if i % 2 else "JPEG") for i in range(6)]
        files[2] = b"plain text, not a picture"
        calls = [("cls", [bytes_input(grpcclient, [f])], f"i-{i}") for i, f in enumerate(files)]
        got = _stream(server, calls)
        assert len(got) == 6
        assert got[2][0] is None
        assert got[2][1].message() == _unary_error(server, "cls", [bytes_input(grpcclient, [files[2]])])
        unary = grpcclient.InferenceServerClient(server.grpc)
        for i in (0, 1, 3, 4, 5):
            result, error = got[i]
            assert error is None and result.get_response().id == f"i-{i}"
            want = recipe(_decode(files[i]))
            np.testing.assert_array_equal(result.as_numpy("indices"), [want.indices])
            np.testing.assert_allclose(result.as_numpy("scores"), [want.scores], rtol=1e-5, atol=1e-6)
            one = unary.infer("cls", [bytes_input(grpcclient, [files[i]])])
            np.testing.assert_array_equal(result.as_numpy("labels"), one.as_numpy("labels"))
