"""A Ray Serve deployment answering the Open Inference Protocol v2 over REST, with the same batcher."""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import OptionError

__all__ = ["OipDeployment", "deployment"]

_ROUTE = re.compile(r"^/v2/models/(?P<name>[^/]+)(?:/versions/[^/]+)?(?P<tail>/ready|/infer)?/?$")


class OipDeployment:
    """One replica: an engine (or Pipeline) behind :class:`~amdinfer.serve.DynamicBatcher`, OIP v2 REST routes.

    Routes (relative to the application's route prefix): ``GET /v2/health/live``, ``GET /v2/health/ready``,
    ``GET /v2/models/<name>``, ``GET /v2/models/<name>/ready``, ``POST /v2/models/<name>/infer`` (JSON or
    binary tensors), the same bodies and status codes as ``amdinfer serve`` (a bad request is a 400 with
    the message). Ray runs it as a Serve deployment: see :func:`deployment`.

    Args:
        name: the model's name in the URLs.
        model: a model to load in the replica; or ``pipeline=``, a function that builds a Pipeline there.
        max_batch_size: rows per engine call at most.
        max_delay_ms: how long a request waits for others.
        **load_options: :func:`amdinfer.load` options.

    Example:
        >>> import asyncio, json
        >>> from amdinfer.testing.models import tiny_cnn
        >>> replica = OipDeployment("tiny", tiny_cnn().SerializeToString(), providers=["CPUExecutionProvider"])
        >>> status, _, body = asyncio.run(replica.handle("GET", "/v2/models/tiny", {}, None))
        >>> status, json.loads(body)["inputs"][0]["shape"]
        (200, [-1, 3, 32, 32])
    """

    def __init__(
        self,
        name: str,
        model: Any = None,
        *,
        pipeline: Any = None,
        max_batch_size: int = 32,
        max_delay_ms: float = 2.0,
        **load_options: Any,
    ) -> None:
        from ..serve import build_model

        if (model is None) == (pipeline is None):
            raise OptionError("OipDeployment: give a model or pipeline=, not both and not neither")
        if pipeline is not None:
            target = pipeline()
        else:
            from .._load import load

            target = load(model, **load_options)
        self.name = name
        self.model = build_model(name, target, max_batch_size=max_batch_size, max_delay_ms=max_delay_ms)
        self._started = False

    async def __call__(self, request: Any) -> Any:
        from starlette.responses import Response

        status, headers, body = await self.handle(request.method, request.url.path, request.headers, request)
        return Response(content=body, status_code=status, headers=headers)

    async def handle(self, method: str, path: str, headers: Any, request: Any) -> tuple[int, dict[str, str], bytes]:
        """Answer one OIP v2 REST call: ``(status, headers, body)``; errors by the server's error table."""
        from ..serve import answer_error, decode_rest
        from ..serve import json_length as header_length

        json_type = {"content-type": "application/json"}
        path = path.rstrip("/") or "/"
        if path in ("/v2/health/live", "/v2/health/ready") and method == "GET":
            key = path.rsplit("/", 1)[1]
            return 200, json_type, json.dumps({key: True}).encode()
        if path == "/v2" and method == "GET":
            return 200, json_type, json.dumps({"name": "amdinfer", "extensions": ["binary_tensor_data"]}).encode()
        m = _ROUTE.match(path)
        if m is None or m.group("name") != self.name:
            return 404, json_type, json.dumps({"error": f"no route or model for {method} {path}"}).encode()
        tail = m.group("tail")
        if tail is None and method == "GET":
            meta = {
                "name": self.name,
                "platform": "amdinfer",
                "inputs": self.model.get_input_types(),
                "outputs": self.model.get_output_types(),
            }
            return 200, json_type, json.dumps(meta).encode()
        if tail == "/ready" and method == "GET":
            return 200, json_type, json.dumps({"name": self.name, "ready": True}).encode()
        if tail != "/infer" or method != "POST":
            return 405, json_type, json.dumps({"error": f"{method} {path}: method not allowed"}).encode()
        if not self._started:
            await self.model.batcher.start()
            self._started = True
        body = await request.body()
        try:
            length = header_length(headers.get("inference-header-content-length"), len(body))
            response = await self.model.predict(decode_rest(body, length, self.name))
        except Exception as exc:
            answer = answer_error(exc, self.name)
            if answer is None or answer.fault:  # a bug or the server's own failure: Ray's 500, with the traceback
                raise
            return answer.http, json_type, json.dumps({"error": answer.message}).encode()
        payload, json_length = response.to_rest()
        if json_length is None:
            # orjson, as the server's REST path: NumPy values, and NaN/inf written as null (strict JSON), never bare NaN
            import orjson  # a KServe dependency, as is this module's whole path

            return 200, json_type, orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
        return (
            200,
            {"content-type": "application/octet-stream", "inference-header-content-length": str(json_length)},
            payload,
        )


def deployment(
    name: str,
    model: Any = None,
    *,
    pipeline: Any = None,
    max_batch_size: int = 32,
    max_delay_ms: float = 2.0,
    num_replicas: int = 1,
    num_gpus: float = 0,
    num_cpus: float = 1,
    **load_options: Any,
) -> Any:
    """A Ray Serve application: ``num_replicas`` replicas of :class:`OipDeployment` (one GPU each with
    ``num_gpus=1``), to start with ``serve.run(app, route_prefix="/")``.

    Args:
        name: the model's name in the URLs.
        model: a model (path, bytes, ModelProto) loaded in each replica; or ``pipeline=`` (a function).
        max_batch_size: rows per engine call at most.
        max_delay_ms: how long a request waits for others.
        num_replicas: replicas (Ray spreads them over the cluster's GPUs and nodes).
        num_gpus: GPUs per replica (Ray sets ``CUDA_VISIBLE_DEVICES``: the engine's ``device=0``).
        num_cpus: CPUs per replica.
        **load_options: :func:`amdinfer.load` options.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> app = deployment("tiny", tiny_cnn().SerializeToString(), providers=["CPUExecutionProvider"])
        >>> type(app).__name__
        'Application'
    """
    from ray import serve

    options = {"num_gpus": num_gpus, "num_cpus": num_cpus}
    cls = serve.deployment(OipDeployment, name=f"amdinfer-{name}", num_replicas=num_replicas, ray_actor_options=options)
    return cls.bind(
        name, model, pipeline=pipeline, max_batch_size=max_batch_size, max_delay_ms=max_delay_ms, **load_options
    )
