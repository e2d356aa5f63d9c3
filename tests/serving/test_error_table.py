"""The REST server, the gRPC server, Ray and the request counter answer every error by the one error table
(amdinfer.errors.error_status); the table itself and the command line: tests/test_error_table.py.

Each check runs in a subprocess: KServe's gRPC protos and tritonclient's (imported by the other test modules)
register the same names in protobuf's default pool, so they cannot share one process.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

PRELUDE = r'''
import asyncio, json
from types import SimpleNamespace

from amdinfer import errors
from amdinfer.errors import AmdinferError, ErrorStatus, InputError, error_status
from kserve.errors import InvalidInput, ModelNotFound, ModelNotReady


def kinds():
    seen, todo = [], [AmdinferError]
    while todo:
        kind = todo.pop()
        if kind not in seen:
            seen.append(kind)
            todo.extend(kind.__subclasses__())
    return seen


def make(kind):
    return kind(f"{kind.__name__} raised by the test")


def expected(exc, model):
    """What the table says the answer is: (HTTP, gRPC code, message)."""
    row = error_status(exc)
    message = str(exc)
    if row.http == 500:  # the server's own failure names the model and the class
        message = f"model {model!r}: {type(exc).__name__}: {message}" if model else f"{type(exc).__name__}: {message}"
    return row.http, row.grpc, message


PROTOCOL = [(InvalidInput("bad body"), 400, "INVALID_ARGUMENT"), (ModelNotFound("ghost"), 404, "NOT_FOUND"),
            (ModelNotReady("det", "loading"), 503, "UNAVAILABLE")]
'''

REST = r"""
from fastapi import FastAPI
from kserve.model_repository import ModelRepository
from kserve.protocol.rest.server import RESTServer
from starlette.testclient import TestClient

from amdinfer.serve import FastDataPlane
from amdinfer.serve._rest import install_routes

app = FastAPI()
dataplane = FastDataPlane(model_registry=ModelRepository())
RESTServer._add_exception_handlers(None, app)  # KServe's handlers, then amdinfer's over them: the server's order
install_routes(app, dataplane, max_request_bytes=1 << 20)
raised = {}


async def boom():
    raise raised["exc"]


app.add_api_route("/boom", boom, methods=["GET"])
client = TestClient(app, raise_server_exceptions=False)


def rest(exc):
    raised["exc"] = exc
    response = client.get("/boom")
    return response.status_code, response.json()["error"]


for kind in kinds():
    exc = make(kind)
    http, _, message = expected(exc, None)
    assert rest(exc) == (http, message), (kind, rest(exc), http, message)
for exc, http, _ in PROTOCOL:
    assert rest(exc) == (http, str(exc)), (exc, rest(exc))
status, body = rest(KeyError("a bug"))  # not in the table: KServe's default
assert status == 500 and "KeyError" in body, (status, body)
errors._STATUSES[InputError] = ErrorStatus(409, "ALREADY_EXISTS", 9)
assert rest(InputError("x")) == (409, "x")
print("ok")
"""

GRPC = r"""
from amdinfer.serve._grpc import _Interceptor


class Aborted(Exception):
    pass


class Context:
    async def abort(self, code, message):
        self.got = (code.name, message)
        raise Aborted


def grpc(exc, model="det"):
    context = Context()
    try:
        asyncio.run(_Interceptor().handle_exception(exc, SimpleNamespace(model_name=model), context, "ModelInfer"))
    except Aborted:
        return context.got
    raise AssertionError(f"{exc!r}: not aborted")


for kind in kinds():
    exc = make(kind)
    _, code, message = expected(exc, "det")
    assert grpc(exc) == (code, message), (kind, grpc(exc), code, message)
for exc, _, code in PROTOCOL:
    assert grpc(exc) == (code, str(exc)), (exc, grpc(exc))
assert grpc(KeyError("a bug")) == ("INTERNAL", "Internal server error")  # not in the table: KServe's default
errors._STATUSES[InputError] = ErrorStatus(409, "ALREADY_EXISTS", 9)
assert grpc(InputError("x")) == ("ALREADY_EXISTS", "x")
print("ok")
"""

MODEL = r"""
import amdinfer
from kserve.protocol.infer_type import InferInput, InferRequest

from amdinfer.ray import OipDeployment
from amdinfer.serve import build_model
from amdinfer.testing.models import tiny_cnn

# AmdinferModel.predict: the error leaves as it was raised, counted invalid (4xx) or error
model = build_model("tiny", amdinfer.load(tiny_cnn(), providers=["CPUExecutionProvider"]))
counted = []
model.metrics.request = lambda outcome, seconds=None: counted.append(outcome)
request = InferRequest("tiny", [InferInput("input", [1, 3, 32, 32], "FP32", [0.0] * 3072)])


def predict(exc):
    def check(feeds):
        raise exc

    model._check = check
    try:
        asyncio.run(model.predict(request))
    except BaseException as got:
        assert got is exc, (exc, got)
        return counted.pop()
    raise AssertionError(f"{exc!r}: not raised")


for kind in kinds():
    exc = make(kind)
    assert predict(exc) == ("invalid" if error_status(exc).http < 500 else "error"), kind
assert predict(KeyError("a bug")) == "error"

# Ray: the request's fault is answered with the table's status; the server's own is Ray's 500 (raised)
replica = OipDeployment("tiny", tiny_cnn().SerializeToString(), providers=["CPUExecutionProvider"])
body = json.dumps({"inputs": [{"name": "input", "shape": [1], "datatype": "FP32", "data": [0.0]}]}).encode()


class Body:
    async def body(self):
        return body


def ray(exc, headers=None):
    async def fail(request):
        raise exc

    replica.model.predict = fail
    status, _, answer = asyncio.run(replica.handle("POST", "/v2/models/tiny/infer", headers or {}, Body()))
    return status, json.loads(answer)["error"]


for kind in [*kinds(), KeyError]:
    exc = make(kind)
    row = error_status(exc)
    if row is None or row.http == 500:
        try:
            ray(exc)
        except BaseException as got:
            assert got is exc, (kind, got)
        else:
            raise AssertionError(f"{kind}: answered, expected Ray's 500")
    else:
        assert ray(exc) == (row.http, str(exc)), (kind, ray(exc))
status, message = ray(None, {"inference-header-content-length": "1e3"})
assert status == 400 and "Inference-Header-Content-Length" in message, message
errors._STATUSES[InputError] = ErrorStatus(409, "ALREADY_EXISTS", 9)
assert ray(InputError("x")) == (409, "x")
print("ok")
"""


@pytest.mark.parametrize("check", [REST, GRPC, MODEL], ids=["rest", "grpc", "predict-and-ray"])
def test_the_servers_answer_every_kind_by_the_table(check: str) -> None:
    proc = subprocess.run([sys.executable, "-c", PRELUDE + check], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout[-3000:] + proc.stderr[-3000:]
