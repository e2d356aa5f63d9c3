"""Known failures of amdinfer's CPU engines on ONNX's backend node tests, with the reason for each.

Read by :mod:`amdinfer.testing.conformance` through each backend's registered conformance kinds
(``ConformanceKind.excludes``); ``tests/engines/test_onnx_conformance.py`` runs them as xfail and fails once a
case passes, so the lists cannot rot.

Example:
    >>> all(isinstance(v, str) for v in ORT_CPU.values())
    True
"""

from __future__ import annotations

__all__ = ["ORT_CPU", "REFERENCE"]

_ML_DTYPES = (
    "onnxruntime's Python binding cannot take or return this element type as a NumPy array "
    "(bfloat16, float8, float4, int4, int2 from ml_dtypes: 'Numpy_type ... can't be converted')"
)

#: ``reference`` kind: onnx.reference gaps.
REFERENCE: dict[str, str] = {
    r"test_range_(float|float16|bfloat16|int32)_type_(positive|negative)_delta_expanded": (
        "onnx.reference gap: Loop stacks the scan output of a scalar as (n, 1) instead of (n,)"
    ),
    "test_scan_sum": "onnx.reference gap: Scan-8 fails on the empty optional 'sequence_lens' input",
    "test_if_opt": (
        "onnx.reference gap: an If branch's Optional(sequence) comes back wrapped in a second list ([[x]] for [x])"
    ),
    r"test_scatter_(with|without)_axis": "onnx.reference has no kernel for Scatter (deprecated since opset 11)",
}

#: ``ort-cpu`` kind: what the CPU build of ONNX Runtime lacks.
ORT_CPU: dict[str, str] = {
    r"test_(cast|castlike)_.*(BFLOAT16|FLOAT8|FLOAT4E2M1|INT4|UINT4|INT2|UINT2|e8m0).*": _ML_DTYPES,
    r"test_(de)?quantizelinear_(e4m3fn|e5m2|float4e2m1|int4|uint4|int2|uint2).*": _ML_DTYPES,
    r"test_.*(bfloat16|_bf16).*": _ML_DTYPES + " or has no bfloat16 kernel on CPU",
    r"test_(adagrad|adam|momentum|nesterov_momentum).*": (
        "training op (ai.onnx.preview.training) is not in onnxruntime's inference build"
    ),
    r"test_flexattention(?!.*_expanded).*": "FlexAttention (ai.onnx.preview) is not implemented by onnxruntime",
    r"test_(de)?quantizelinear(_axis|_blocked.*|_int16|_uint16)?": (
        "onnxruntime has no CPU kernel for the newest QuantizeLinear/DequantizeLinear opset of these cases"
    ),
    r"test_(max|min)_u?int16": "onnxruntime has no CPU Max/Min kernel for (u)int16",
    r"test_pow_types_float32_uint(32|64)": "onnxruntime has no CPU Pow kernel for a uint32/uint64 exponent",
    "test_top_k_uint64": "onnxruntime has no CPU TopK kernel for uint64",
    r"test_roialign_.*": "onnxruntime has no CPU kernel for RoiAlign at the opset of these cases",
    r"test_swiglu.*": "onnxruntime has no CPU kernel for Swish (opset 24)",
    "test_bitcast_bool_to_uint8": "onnxruntime has no CPU BitCast kernel for bool",
    r"test_image_decoder_.*": "onnxruntime has no CPU kernel for ImageDecoder",
    r"test_optional_(get|has)_element_.*": (
        "onnxruntime has no CPU kernel for OptionalGetElement/OptionalHasElement at the opset of these cases (28; "
        "it has them at opset 21)"
    ),
    r"test_(gru|lstm|simple_rnn)_batchwise": "onnxruntime's CPU RNN kernels do not support layout=1",
    r"test_strnormalizer_export_monday_(casesensintive_(lower|upper)|empty_output|insensintive_upper_twodim)": (
        "onnxruntime's StringNormalizer needs a locale this machine lacks ('Exception during initialization')"
    ),
    "test_convinteger_with_padding": "onnxruntime's ConvInteger rejects the padding of this case",
    "test_maxunpool_export_with_output_shape": (
        "onnxruntime's MaxUnpool places values differently when output_shape is given"
    ),
    r"test_resize_downsample_scales_(cubic|linear)_align_corners": (
        "onnxruntime's align_corners downsampling differs from the spec's reference"
    ),
    r"test_dft.*": "float32 FFT rounding: near-zero bins differ by ~1e-4, above the case's atol 1e-7",
    r"test_stft(_with_window)?": "float32 FFT rounding: near-zero bins differ by ~1e-6, above the case's atol 1e-7",
    "test_attention_4d_causal_fp16": "float16 rounding: one element off by 1.2e-3 relative (rtol 1e-3)",
    r"test_attention_4d_with_past_and_present_qk_matmul_bias_(3d|4d)_mask_causal": (
        "onnxruntime places the -inf of the causal mask differently in the qk_matmul output"
    ),
    "test_attention_4d_diff_heads_mask4d_padded_kv": "onnxruntime rejects the 4-D mask with padded KV at run time",
}
