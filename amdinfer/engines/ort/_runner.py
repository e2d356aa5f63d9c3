"""Which runner an ORT engine uses: plain ``session.run`` with NumPy, or the IOBinding runner on a device.

Example:
    >>> from amdinfer.engines.ort import OrtOptions
    >>> OrtOptions().binds_io("CPUExecutionProvider")
    False
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import OptionError
from ._iobinding import IoBindingRunner
from ._options import OrtOptions
from ._providers import PROVIDERS, ort_device_type

__all__ = ["make_runner"]


def make_runner(
    ort: Any,
    session: Any,
    providers: Sequence[str],
    device_id: int,
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    options: OrtOptions,
    info: Any,
) -> IoBindingRunner | None:
    """The runner an ORT engine uses (``None``: plain ``session.run`` with NumPy), recorded in ``info``.

    A model with a sequence or optional input or output runs through ``session.run`` (IOBinding binds tensors);
    asking for ``io_binding=True`` on one is an :class:`~amdinfer.OptionError`.

    Args:
        ort: the ``onnxruntime`` module.
        session: the engine's session.
        providers: the providers the session really uses.
        device_id: GPU index.
        inputs: input specs.
        outputs: output specs.
        options: the engine's :class:`~amdinfer.engines.ort.OrtOptions` (``io_binding``, ``outputs_on``, ``fp16_io``).
        info: the engine's ``EngineInfo`` (``settings["data_path"]`` is set).

    Example:
        >>> import onnxruntime as ort
        >>> from amdinfer.engines.ort import OrtOptions
        >>> from amdinfer.engines.base import EngineInfo
        >>> from amdinfer.testing.models import tiny_cnn
        >>> sess = ort.InferenceSession(tiny_cnn().SerializeToString(), providers=["CPUExecutionProvider"])
        >>> info = EngineInfo(backend="ort")
        >>> make_runner(ort, sess, ["CPUExecutionProvider"], 0, [], [], OrtOptions(), info) is None
        True
        >>> info.settings["data_path"]["io_binding"]
        False
    """
    provider = providers[0] if providers else "CPUExecutionProvider"
    bind = options.binds_io(provider)
    value = next((s for s in (*inputs, *outputs) if not getattr(s, "is_tensor", True)), None)
    if bind and value is not None:
        # IOBinding binds tensors: a sequence or optional value goes through plain session.run.
        kind = "input" if value in inputs else "output"
        if options.io_binding:
            raise OptionError(
                f"io_binding=True: {kind} {value.name!r} is a {value.type_name}, and IOBinding binds tensors only; "
                "load with io_binding=False (or leave it unset)"
            )
        bind = False
        info.notes.append(f"no IOBinding: {kind} {value.name!r} is a {value.type_name} (session.run with NumPy)")
    opts = info.settings.get("provider_options", {}).get(provider, {})
    record = PROVIDERS.get(provider)
    graph_options = record.option_names("gpu_graphs") if record is not None else ()
    graphs = bind and any(opts.get(k) == "1" for k in graph_options)
    info.settings["data_path"] = {
        "io_binding": bind,
        "device_memory": ort_device_type(provider) if bind else "cpu",
        "outputs_on": options.outputs_on,
        "gpu_graphs": graphs,
        "fp16_io": options.fp16_io,
    }
    if not bind:
        return None
    runner = IoBindingRunner(ort, session, provider, device_id, inputs, [s.name for s in outputs], graphs=graphs)
    if graphs and not runner._d2d:
        info.notes.append(
            f"onnxruntime {ort.__version__} has no device-to-device OrtValue copy: runs with device tensors "
            "bind them directly and skip graph replay"
        )
    return runner
