"""The ORT engine's own options, validated once into a frozen record before anything is built.

Example:
    >>> opts = OrtOptions.create(threads=2, graph_optimization="basic")
    >>> opts.threads, opts.level_name
    (2, 'ORT_ENABLE_BASIC')
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..._support._validate import check_bool, check_int, check_optional_bool
from ...errors import OptionError
from ._providers import resolve_provider_name
from ._shape_sessions import check_shape_sessions
from ._transformer import check_transformer_fusion
from ._tuning import DataPathOptions

__all__ = ["GRAPH_OPTIMIZATION_LEVELS", "KNOBS", "OrtOptions", "ProviderSpec"]

#: ``graph_optimization=`` values and ONNX Runtime's ``GraphOptimizationLevel`` member names.
GRAPH_OPTIMIZATION_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}

#: The typed provider knobs of :class:`~amdinfer.engines.ort.OrtEngine` (see ``provider_options``).
KNOBS: tuple[str, ...] = (
    "exhaustive_tune",
    "tunable_ops",
    "memory_limit",
    "model_cache_dir",
    "gpu_graphs",
    "prefer_nhwc",
)

ProviderSpec = str | tuple[str, Mapping[str, Any]]


def _normalize_spec(spec: Any) -> tuple[str, dict[str, str]]:
    if isinstance(spec, tuple):
        if len(spec) != 2 or not isinstance(spec[1], Mapping):
            raise OptionError(f"providers: got {spec!r}, expected a name or (name, {{option: value}})")
        return resolve_provider_name(spec[0]), {str(k): str(v) for k, v in spec[1].items()}
    return resolve_provider_name(spec), {}


@dataclass(frozen=True)
class OrtOptions:
    """Everything :class:`~amdinfer.engines.ort.OrtEngine` takes besides the shared engine options.

    Attributes:
        providers: ``(name, raw options)`` per requested provider; ``None``: auto.
        threads, inter_op_threads, spin_wait, graph_optimization, optimized_model_path,
        allow_cpu_nodes, cache_dir, use_cache: session options (see ``OrtEngine``).
        transformer_fusion: ``"auto"``, ``True`` or ``False`` (see :mod:`amdinfer.engines.ort._transformer`).
        shape_sessions: ``"auto"`` or sessions per engine, one per input shape (see
            :mod:`amdinfer.engines.ort._shape_sessions`).
        knobs: typed provider knob -> value (``None``: not set).
        ep_libraries: plugin EP libraries to register (``ep_library=``), checked to exist.
        datapath: the IO options (:class:`~amdinfer.engines.ort.DataPathOptions`).

    Example:
        >>> OrtOptions.create(providers=["cpu"]).providers
        (('CPUExecutionProvider', {}),)
    """

    providers: tuple[tuple[str, dict[str, str]], ...] | None = None
    threads: int | None = None
    inter_op_threads: int | None = None
    spin_wait: bool | None = None
    graph_optimization: str = "all"
    optimized_model_path: str | os.PathLike | None = None
    allow_cpu_nodes: bool = True
    cache_dir: str | os.PathLike | None = None
    use_cache: bool | None = None
    transformer_fusion: str | bool = "auto"
    shape_sessions: int | str = "auto"
    knobs: Mapping[str, Any] = field(default_factory=dict)
    datapath: DataPathOptions = field(default_factory=DataPathOptions)
    ep_libraries: tuple[str, ...] = ()

    @property
    def level_name(self) -> str:
        """ONNX Runtime's ``GraphOptimizationLevel`` member name."""
        return GRAPH_OPTIMIZATION_LEVELS[self.graph_optimization]

    @classmethod
    def create(
        cls,
        *,
        precision: str = "fp32",
        providers: Sequence[ProviderSpec] | str | None = None,
        threads: int | None = None,
        inter_op_threads: int | None = None,
        spin_wait: bool | None = None,
        graph_optimization: str = "all",
        optimized_model_path: str | os.PathLike | None = None,
        allow_cpu_nodes: bool = True,
        cache_dir: str | os.PathLike | None = None,
        use_cache: bool | None = None,
        io_binding: bool | None = None,
        outputs_on: str = "auto",
        tuning: bool = True,
        tf32: bool | None = None,
        fp16_io: bool = False,
        ep_library: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
        transformer_fusion: str | bool = "auto",
        shape_sessions: int | str = "auto",
        **knobs: Any,
    ) -> OrtOptions:
        """Validate and build (a misspelt keyword is a ``TypeError``, a bad value an ``OptionError``).

        Example:
            >>> OrtOptions.create(threads=-1)
            Traceback (most recent call last):
            ...
            amdinfer.errors.OptionError: threads: got -1, expected an int >= 0 (0: ONNX Runtime's default)
        """
        unknown = sorted(set(knobs) - set(KNOBS))
        if unknown:
            raise TypeError(f"OrtEngine got unexpected keyword arguments {unknown}")
        if graph_optimization not in GRAPH_OPTIMIZATION_LEVELS:
            raise OptionError(
                f"graph_optimization: got {graph_optimization!r}, expected one of {list(GRAPH_OPTIMIZATION_LEVELS)}"
            )
        for name, value in (("threads", threads), ("inter_op_threads", inter_op_threads)):
            if value is not None:
                check_int(name, value, minimum=0, what="an int >= 0 (0: ONNX Runtime's default)")
        check_optional_bool("spin_wait", spin_wait, none_means="ONNX Runtime's default")
        check_bool("allow_cpu_nodes", allow_cpu_nodes)
        check_optional_bool("use_cache", use_cache)
        candidates = None
        if providers is not None:
            if isinstance(providers, str):
                providers = [providers]
            candidates = tuple(_normalize_spec(p) for p in providers)
            if not candidates:
                raise OptionError("providers: got an empty list, expected at least one provider")
        if optimized_model_path is not None:
            optimized_model_path = _check_optimized_model_path(optimized_model_path)
        datapath = DataPathOptions.create(
            precision=precision, io_binding=io_binding, outputs_on=outputs_on, tuning=tuning, tf32=tf32, fp16_io=fp16_io
        )
        return cls(
            providers=candidates,
            threads=threads,
            inter_op_threads=inter_op_threads,
            spin_wait=spin_wait,
            graph_optimization=graph_optimization,
            optimized_model_path=optimized_model_path,
            allow_cpu_nodes=allow_cpu_nodes,
            cache_dir=cache_dir,
            use_cache=use_cache,
            transformer_fusion=check_transformer_fusion(transformer_fusion),
            shape_sessions=check_shape_sessions(shape_sessions),
            knobs={k: knobs.get(k) for k in KNOBS},
            datapath=datapath,
            ep_libraries=_check_ep_libraries(ep_library),
        )

    def session_settings(self) -> dict[str, Any]:
        """The session options as recorded in ``engine.info.settings["session"]``."""
        return {
            "intra_op_num_threads": self.threads or 0,
            "inter_op_num_threads": self.inter_op_threads or 0,
            "intra_op_allow_spinning": self.spin_wait,  # None: ONNX Runtime's default (on)
            "graph_optimization_level": self.level_name,
            "optimized_model_filepath": str(self.optimized_model_path) if self.optimized_model_path else None,
            "disable_cpu_ep_fallback": not self.allow_cpu_nodes,
        }


def _check_optimized_model_path(value: Any) -> Path:
    """``optimized_model_path`` checked before ONNX Runtime writes to it (its own errors are bare errnos)."""
    from ..._support._files import check_path, file_kind

    path = check_path(value, "optimized_model_path").expanduser()
    try:
        st = path.stat()
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OptionError(f"optimized_model_path: '{path}' cannot be used ({exc.strerror or exc})") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OptionError(
            f"optimized_model_path: '{path}' is {file_kind(st.st_mode)}; expected a file path (it is overwritten)"
        )
    folder = path.parent
    if not folder.is_dir():
        raise OptionError(f"optimized_model_path: folder '{folder}' of '{path}' does not exist; create it first")
    if not os.access(folder, os.W_OK):
        raise OptionError(f"optimized_model_path: folder '{folder}' is not writable")
    return path


def _check_ep_libraries(value: Any) -> tuple[str, ...]:
    """``ep_library=``: one path or a list of paths of ONNX Runtime plugin EP libraries, each an existing file.

    Example:
        >>> _check_ep_libraries("/no/such/libep.so")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: ep_library: '/no/such/libep.so' is not a file; expected the path of ...
    """
    if value is None:
        return ()
    paths = [value] if isinstance(value, (str, os.PathLike)) else list(value)
    out = []
    for item in paths:
        if not isinstance(item, (str, os.PathLike)):
            raise OptionError(f"ep_library: got {item!r}, expected a path (str or os.PathLike)")
        path = Path(item).expanduser()
        if not path.is_file():
            raise OptionError(
                f"ep_library: '{item}' is not a file; expected the path of an ONNX Runtime plugin EP library "
                "(e.g. onnxruntime_ep_openvino.get_library_path())"
            )
        out.append(str(path))
    return tuple(out)
