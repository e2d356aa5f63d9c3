"""Triton's versioned model folder in a repository: ``NAME/<version>/model.onnx`` and an optional ``NAME/config.pbtxt``.

The version served is the highest numbered folder holding the model file, or the one ``version_policy`` names
(``latest { num_versions: 1 }``, ``specific { versions: [N] }``, ``all`` with one version folder): this server
serves one version per name. Of ``config.pbtxt`` (parsed by :func:`~amdinfer.serve._config_proto.parse_pbtxt`),
the fields that map to amdinfer's options are honoured:

=================================================================  ============================================
``config.pbtxt``                                                   amdinfer
=================================================================  ============================================
``max_batch_size: N``                                              ``max_batch_size`` (``0``: 1, no batching)
``dynamic_batching { preferred_batch_size: [...] }``               ``batch_buckets``
``dynamic_batching { max_queue_delay_microseconds: U }``           ``max_delay_ms = U / 1000``
``instance_group [{ kind: KIND_CPU }]``                            ``providers = ["cpu"]``
``instance_group [{ kind: KIND_GPU, gpus: [...] }]``               the model's devices, among the server's
``instance_group [{ count: C }]``                                  checked: the server's processes per device
``optimization { execution_accelerators {``                        ``providers`` (``migraphx``, ``rocm``,
``gpu_execution_accelerator [{ name: "migraphx" }] } }``           ``cuda``, ``tensorrt``)
``input`` / ``output`` (``name``, ``data_type``, ``dims``)          checked against the model at load
``name``, ``platform: "onnxruntime_onnx"``, ``backend``,            checked
``default_model_filename``, ``version_policy``
=================================================================  ============================================

Any other field is refused by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..bundle import MANIFEST
from ..errors import OptionError
from ._bundles import bundle_batching, bundle_folder
from ._config_proto import parse_pbtxt

__all__ = ["LAYOUTS", "check_tensors", "is_triton_folder", "read_triton_model"]

#: what a repository's model folders may look like, for errors
LAYOUTS = (
    "amdinfer's layout NAME.onnx or NAME/model.onnx or a bundle folder NAME/ (options in models.toml), or Triton's "
    "NAME/<version>/model.onnx (or a bundle in NAME/<version>/) with an optional NAME/config.pbtxt"
)
_ACCELERATORS = {"migraphx": "migraphx", "rocm": "rocm", "cuda": "cuda", "tensorrt": "TensorrtExecutionProvider"}
_KINDS = ("KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL")


def is_triton_folder(folder: Path) -> bool:
    """Whether ``folder`` is laid out as Triton's: a ``config.pbtxt`` or a numbered sub-folder."""
    return (folder / "config.pbtxt").is_file() or any(p.is_dir() and p.name.isdigit() for p in folder.iterdir())


def _version(folder: Path, config: Any, filename: str) -> str:
    """The version folder served, by ``version_policy`` (default: the highest)."""
    versions = sorted(
        int(p.name)
        for p in folder.iterdir()
        if p.name.isdigit() and ((p / filename).is_file() or bundle_folder(p) is not None)
    )
    if not versions:
        raise OptionError(f"{folder}: no version folder holds {filename}; expected {LAYOUTS}")
    where = f"{folder / 'config.pbtxt'}: version_policy"
    policy = config.version_policy
    if policy.HasField("specific"):
        wanted = list(policy.specific.versions)
        if len(wanted) != 1 or wanted[0] not in versions:
            raise OptionError(
                f"{where}: specific versions {wanted}, expected one of the folders {versions} (this server serves "
                "one version per name)"
            )
        return str(wanted[0])
    if policy.HasField("all") and len(versions) > 1:
        raise OptionError(f"{where}: all, but there are versions {versions}; this server serves one version per "
                          "name: use latest { num_versions: 1 } or specific { versions: [N] }")  # fmt: skip
    if policy.HasField("latest") and policy.latest.num_versions > 1:
        raise OptionError(f"{where}: latest {{ num_versions: {policy.latest.num_versions} }}, but this server serves "
                          "one version per name: use num_versions: 1")  # fmt: skip
    return str(versions[-1])


def _instances(config: Any, where: str, processes: int) -> tuple[dict[str, Any], tuple[int, ...]]:
    """The options and devices of ``instance_group`` and ``optimization``."""
    options: dict[str, Any] = {}
    gpus: tuple[int, ...] = ()
    groups = list(config.instance_group)
    if len(groups) > 1:
        raise OptionError(f"{where}: instance_group has {len(groups)} groups, expected one (one kind of device)")
    for group in groups:
        kind = _KINDS[group.kind]
        if kind == "KIND_MODEL":
            raise OptionError(f"{where}: instance_group kind KIND_MODEL, expected KIND_GPU, KIND_CPU or KIND_AUTO")
        if group.HasField("count") and group.count != processes:
            raise OptionError(
                f"{where}: instance_group count {group.count}, but this server runs {processes} process(es) per "
                f"device, each with one instance; start it with --workers-per-device {group.count}"
            )
        if kind == "KIND_CPU":
            options["providers"] = ["cpu"]
        gpus = tuple(group.gpus)
        if gpus and kind == "KIND_CPU":
            raise OptionError(f"{where}: instance_group kind KIND_CPU with gpus {list(gpus)}; give one or the other")
    accelerators = [a.name for a in config.optimization.execution_accelerators.gpu_execution_accelerator]
    unknown = [a for a in accelerators if a not in _ACCELERATORS]
    if unknown:
        raise OptionError(f"{where}: gpu_execution_accelerator {unknown}, expected names among {list(_ACCELERATORS)}")
    if accelerators:
        if "providers" in options:
            raise OptionError(f"{where}: gpu_execution_accelerator {accelerators} with instance_group KIND_CPU")
        options["providers"] = [_ACCELERATORS[a] for a in accelerators]
    return options, gpus


def _tensors(config: Any) -> tuple[tuple[str, str, str, tuple[int, ...]], ...]:
    """``(kind, name, OIP datatype, full dims)`` of the config's inputs and outputs (the batch axis as -1)."""
    from ._config_proto import _ENUMS

    out = []
    batch = (-1,) if config.max_batch_size > 0 else ()
    for kind, tensors in (("input", config.input), ("output", config.output)):
        for t in tensors:
            datatype = _ENUMS["DataType"][t.data_type].removeprefix("TYPE_").replace("STRING", "BYTES")
            dims = tuple(t.reshape.shape) if t.HasField("reshape") else tuple(t.dims)
            out.append((kind, t.name, "" if datatype == "INVALID" else datatype, batch + dims))
    return tuple(out)


def read_triton_model(folder: Path, *, processes: int = 1) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """The model file, amdinfer's options and the checks of a Triton-layout folder.

    Returns:
        ``(path, options, extras)``: the served version's model file; options for ``models.toml``'s table
        (``max_batch_size``, ``max_delay_ms``, ``batch_buckets``, ``providers``); ``version``, ``gpus`` and
        ``tensors`` (to check against the model at load).

    Raises:
        OptionError: a ``config.pbtxt`` field amdinfer does not read (named), a value it cannot honour (why),
            or no version folder with the model file.

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp()) / "det"
        >>> for v in ("1", "3"): (root / v).mkdir(parents=True); _ = (root / v / "model.onnx").write_bytes(b"")
        >>> text = "max_batch_size: 8 dynamic_batching { preferred_batch_size: [4, 8] }"
        >>> _ = (root / "config.pbtxt").write_text(text)
        >>> path, options, extras = read_triton_model(root)
        >>> path.parent.name, options, extras["version"]
        ('3', {'max_batch_size': 8, 'batch_buckets': [4, 8]}, '3')
    """
    pbtxt = folder / "config.pbtxt"
    where = str(pbtxt)
    config = parse_pbtxt(pbtxt.read_text(encoding="utf-8"), where) if pbtxt.is_file() else parse_pbtxt("", where)
    if config.name and config.name != folder.name:
        raise OptionError(f"{where}: name {config.name!r}, expected the folder's name {folder.name!r} (or none)")
    if config.platform not in ("", "onnxruntime_onnx") or config.backend not in ("", "onnxruntime"):
        got = config.platform or config.backend
        raise OptionError(f"{where}: got platform/backend {got!r}, expected onnxruntime_onnx / onnxruntime (ONNX)")
    filename = config.default_model_filename or "model.onnx"
    if Path(filename).name != filename or not filename.endswith(".onnx"):
        raise OptionError(f"{where}: default_model_filename {filename!r}, expected an .onnx file name")
    version = _version(folder, config, filename)
    options, gpus = _instances(config, where, processes)
    if config.HasField("max_batch_size"):
        options["max_batch_size"] = max(1, config.max_batch_size)  # 0: Triton's "no batching"
    batching = config.dynamic_batching
    if batching.preferred_batch_size:
        options["batch_buckets"] = list(batching.preferred_batch_size)
    if batching.HasField("max_queue_delay_microseconds"):
        options["max_delay_ms"] = batching.max_queue_delay_microseconds / 1000
    extras = {"version": version, "gpus": gpus, "tensors": _tensors(config)}
    path = folder / version / filename
    bundle = bundle_folder(folder / version) if not path.is_file() else None
    if bundle is not None:  # a bundle as the version: served as built, its buckets the server's
        batching = bundle_batching(bundle, options.get("batch_buckets"), where)
        options.setdefault("max_batch_size", batching["max_batch_size"])
        options.pop("batch_buckets", None)
        path = bundle / MANIFEST
    return path, options, extras


def check_tensors(tensors: tuple[tuple[str, str, str, tuple[int, ...]], ...], worker: Any) -> None:
    """``config.pbtxt``'s inputs and outputs against the loaded model's (a worker's ``inputs``/``outputs``): each
    named one exists, with the same datatype and dims (``-1`` on either side matches any size).

    Raises:
        OptionError: a tensor the model does not have, or another datatype or shape, named.

    Example:
        >>> import amdinfer
        >>> from amdinfer.serve import EngineWorker
        >>> from amdinfer.testing.models import tiny_cnn
        >>> worker = EngineWorker(amdinfer.load(tiny_cnn(), providers=["cpu"]))
        >>> check_tensors((("input", "input", "FP32", (-1, 3, 32, 32)),), worker)
        >>> check_tensors((("output", "logits", "FP16", (-1, 10)),), worker)
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: config.pbtxt: output 'logits' has data_type TYPE_FP16, but the model's is TYPE_FP32
        >>> worker.engine.close()
    """
    from ._oip import tensor_metadata

    specs = {("input", t["name"]): t for t in tensor_metadata(worker.inputs)}
    specs.update({("output", t["name"]): t for t in tensor_metadata(worker.outputs)})
    for kind, name, datatype, dims in tensors:
        spec = specs.get((kind, name))
        if spec is None:
            names = sorted(n for k, n in specs if k == kind)
            raise OptionError(f"config.pbtxt: {kind} {name!r} is not one of the model's {kind}s {names}")
        if datatype and datatype != spec["datatype"]:
            want, got = (f"TYPE_{t}".replace("BYTES", "STRING") for t in (datatype, spec["datatype"]))
            raise OptionError(f"config.pbtxt: {kind} {name!r} has data_type {want}, but the model's is {got}")
        shape = spec["shape"]
        if len(dims) != len(shape) or any(a != b and -1 not in (a, b) for a, b in zip(dims, shape)):
            raise OptionError(
                f"config.pbtxt: {kind} {name!r} has dims {list(dims)} (the batch axis as -1 when max_batch_size > 0), "
                f"but the model's shape is {shape}"
            )
