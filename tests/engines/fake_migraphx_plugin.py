"""A stand-in for AMD's MIGraphX plugin EP (``onnxruntime-ep-migraphx``) at ONNX Runtime's Python API.

No plugin EP library offers a device on a CPU-only machine (docs/testing.md), and building one needs ONNX
Runtime's C headers, which no registry package ships. So the *plugin's behaviour* is played here, above the C ABI,
by an ``onnxruntime`` look-alike that the ORT engine is handed in place of the real module:

* ``register_execution_provider_library`` registers ``MIGraphXExecutionProvider`` and ``get_ep_devices()`` then
  lists one GPU device of AMD's (vendor 0x1002);
* ``SessionOptions.add_provider_for_devices`` records the options, and the session **reads only the option names
  of the plugin's sources** (``src/migraphx/mgx_options.h``: ``cache_dir``, ``fp16_enable``, ...; plus the nine
  aliased ``migraphx_*`` names) and ignores every other key without an error, as the plugin does;
* "compiling" writes one program per model into ``cache_dir`` (``<sha256>.mxr``) and a later session with the
  same ``cache_dir`` reads it instead (``FakeOrt.compiled`` / ``FakeOrt.loaded`` count both);
* the outputs are the real CPU EP's (a real ``onnxruntime.InferenceSession`` underneath), so answers are checked.

Everything else is the real ``onnxruntime`` module.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import onnxruntime as _ort

EP = "MIGraphXExecutionProvider"
#: What the plugin reads (its own names and the aliases it keeps); everything else it drops silently.
READS = {"cache_dir", "fp16_enable", "exhaustive_tune", "hip_graph_enable", "max_dynamic_batch", "compile_batches"}
READS |= {"migraphx_fp16_enable", "migraphx_exhaustive_tune", "device_id"}


class FakeSessionOptions:
    """``onnxruntime.SessionOptions`` that records what the engine sets."""

    def __init__(self) -> None:
        self.config: dict[str, str] = {}
        self.ep_options: list[tuple[list[Any], dict[str, str]]] = []
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = None
        self.log_severity_level = 2
        self.optimized_model_filepath = ""

    def add_session_config_entry(self, key: str, value: str) -> None:
        self.config[key] = value

    def add_provider_for_devices(self, devices: list[Any], options: dict[str, str]) -> None:
        assert all(d.ep_name == EP for d in devices), devices
        self.ep_options.append((devices, dict(options)))


class FakeOrt:
    """The ``onnxruntime`` module with the MIGraphX plugin EP played in Python (see the module docstring)."""

    SessionOptions = FakeSessionOptions

    def __init__(self) -> None:
        self.registered = False
        self.compiled = 0
        self.loaded = 0
        self.sessions: list[FakeSession] = []
        hw = SimpleNamespace(type="OrtHardwareDeviceType.GPU", vendor="AMD", vendor_id=0x1002)
        self._device = SimpleNamespace(ep_name=EP, device=hw, ep_metadata={"arch": "gfx942"}, ep_options={})

    def __getattr__(self, name: str) -> Any:
        return getattr(_ort, name)

    def register_execution_provider_library(self, name: str, path: str) -> None:
        assert Path(path).is_file(), path
        self.registered = True

    def get_ep_devices(self) -> list[Any]:
        return [*_ort.get_ep_devices(), *([self._device] if self.registered else [])]

    def get_available_providers(self) -> list[str]:
        return [*([EP] if self.registered else []), *_ort.get_available_providers()]

    def InferenceSession(self, model: Any, sess_options: Any = None, **kw: Any) -> FakeSession:
        if kw.get("providers") or not getattr(sess_options, "ep_options", None):
            return _ort.InferenceSession(model, sess_options=_real_options(sess_options), **kw)  # type: ignore[return-value]
        session = FakeSession(self, model, sess_options)
        self.sessions.append(session)
        return session


def _real_options(so: Any) -> Any:
    real = _ort.SessionOptions()
    if isinstance(so, FakeSessionOptions):
        for key, value in so.config.items():
            real.add_session_config_entry(key, value)
        return real
    return so


class FakeSession:
    """A session "compiled" by the fake plugin; runs on a real CPU session."""

    def __init__(self, fake: FakeOrt, model: Any, so: FakeSessionOptions) -> None:
        data = Path(model).read_bytes() if isinstance(model, (str, Path)) else bytes(model)
        ((_, options),) = so.ep_options
        self.options = options
        self.read = {k: v for k, v in options.items() if k in READS}
        self.dropped = sorted(set(options) - READS)
        cache = self.read.get("cache_dir")
        program = Path(cache) / f"{hashlib.sha256(data).hexdigest()}.mxr" if cache else None
        if program is not None and program.is_file():
            fake.loaded += 1
        else:
            fake.compiled += 1
            if program is not None:
                program.parent.mkdir(parents=True, exist_ok=True)
                program.write_bytes(b"compiled program")
        self._real = _ort.InferenceSession(data, providers=["CPUExecutionProvider"])

    def get_providers(self) -> list[str]:
        return [EP, "CPUExecutionProvider"]

    def get_provider_graph_assignment_info(self) -> list[Any]:
        nodes = list(range(8))
        return [SimpleNamespace(ep_name=EP, get_nodes=lambda: nodes)]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)
