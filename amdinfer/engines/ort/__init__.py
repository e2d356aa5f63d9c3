"""The ONNX Runtime backend, in one folder.

=================== ===========================================================================
module              what it holds
=================== ===========================================================================
``_providers``      one :class:`ExecutionProvider` record per execution provider; every table and
                    :func:`provider_options` derive from them
``_options``        :class:`OrtOptions`: every option of the engine, one typed, documented field
                    each, validated once as the record is built
``_session``        session options, the compiled-model cache, IR lowering, creation errors
``_quant``          quantizers on ORT (MIGraphX EP flags and calibration table, else the rewrite)
``_tuning``         amdinfer's tuned provider defaults, planned and reported
``_epcontext``      EPContext models: ORT's compile API and its compiled-model compatibility check
``_iobinding``      :class:`IoBindingRunner`: device buffers per shape, CUDA/HIP graph replay
``_runner``         which runner an engine uses
``_values``         ``OrtValue`` registered as a DLPack device value (see :mod:`amdinfer.engines._dlpack`)
``engine``          :class:`OrtEngine`: the construction template's ``_load`` and ``_run``
=================== ===========================================================================

Example:
    >>> from amdinfer.engines.ort import OrtEngine, provider_options
    >>> OrtEngine.backend_name, provider_options("CPUExecutionProvider")
    ('ort', {})
"""

from . import _values  # noqa: F401 - registers OrtValue with DeviceArray
from ._epcontext import (
    compatibility_verdict,
    compile_api_missing,
    compile_epcontext,
    ep_device_record,
    epcontext_device,
    epcontext_nodes,
)
from ._errors import translate_run_error
from ._iobinding import OUTPUTS_ON, IoBindingRunner
from ._options import GRAPH_OPTIMIZATION_LEVELS, OrtOptions, ProviderSpec
from ._providers import (
    AMD_PROVIDERS,
    CPU_EP,
    CUDA_EP,
    GPU_PROVIDERS,
    MIGRAPHX_EP,
    ORT_DISTRIBUTIONS,
    PROVIDER_ORDER,
    PROVIDERS,
    ROCM_EP,
    ExecutionProvider,
    Option,
    TunedDefault,
    fix_for,
    import_ort,
    installed_ort_distributions,
    ort_device_type,
    probe_provider,
    provider_options,
    provider_record,
    resolve_provider_name,
)
from ._runner import make_runner
from ._tuning import (
    TUNABLE_KNOBS,
    KnobChoice,
    TuningPlan,
    apply_tuning,
    drop_default_graphs,
    plan_tuning,
    without_graphs,
)
from .engine import OrtEngine

__all__ = [
    "AMD_PROVIDERS",
    "CPU_EP",
    "CUDA_EP",
    "GPU_PROVIDERS",
    "GRAPH_OPTIMIZATION_LEVELS",
    "MIGRAPHX_EP",
    "ORT_DISTRIBUTIONS",
    "OUTPUTS_ON",
    "PROVIDERS",
    "PROVIDER_ORDER",
    "ROCM_EP",
    "TUNABLE_KNOBS",
    "ExecutionProvider",
    "IoBindingRunner",
    "KnobChoice",
    "Option",
    "OrtEngine",
    "OrtOptions",
    "ProviderSpec",
    "TunedDefault",
    "TuningPlan",
    "apply_tuning",
    "compatibility_verdict",
    "compile_api_missing",
    "compile_epcontext",
    "drop_default_graphs",
    "ep_device_record",
    "epcontext_device",
    "epcontext_nodes",
    "fix_for",
    "import_ort",
    "installed_ort_distributions",
    "make_runner",
    "ort_device_type",
    "plan_tuning",
    "probe_provider",
    "provider_options",
    "provider_record",
    "resolve_provider_name",
    "translate_run_error",
    "without_graphs",
]
