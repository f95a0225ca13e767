"""Negative tests per op (issue 12): an unsupported variant of each op is refused with one clean
line that names the op -- never a traceback, a wrong number or an anonymous message.

* float64: the M100 has no f64 arithmetic. For each op below, the node-test case of
  :data:`F64_CASES` (one that passes in float32) with every float32 tensor made float64 (graph
  inputs/outputs, initializers, constants) must be refused naming the op (``driver.refuse_float64``,
  before torch-mlir runs: a few ms each). :data:`F64_MODELS`: the same for ops whose passing
  cases have no float32 tensor to widen (a dtype attribute, integer inputs). Cast/CastLike at the
  graph boundary to/from float32/float16 is supported (test_quant_narrow_types.py), so their cases
  here widen a conversion that stays refused (float64 -> bfloat16 / float8).
* :data:`REFUSED_CASES`: node-test cases of other ops' unsupported variants whose refusal names the
  op (CumSum of float64, ops torch-mlir cannot lower in some form).
* :data:`QUANT_REFUSED`: the quantized operators' unsupported forms (run-time weights / scales the
  exact rewrites cannot take, bfloat16 scales, a uint16 result read by another op), refused by
  ``onnx_rewrite_qruntime.refusal`` before torch-mlir, naming the node and what to do; left to
  torch-mlir they failed later without the op's name (``tensor.extract``, ``linalg.*_q``, i32 x i32
  TCU operands).

Ops with no refused variant at all are exempt in ``m100.tools.op_audit.NO_NEGATIVE``.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from m100.errors import M100Error
from m100.tools import node_tests
from m100.tools.onnx_backend import M100Backend

F64_CASES = {
    "Abs": "test_abs", "Acos": "test_acos_example", "Acosh": "test_acosh_example",
    "Add": "test_add_bcast", "ArgMax": "test_argmax_no_keepdims_random",
    "ArgMin": "test_argmin_default_axis_example", "Asin": "test_asin",
    "Asinh": "test_asinh_example", "Atan": "test_atan_example", "Atanh": "test_atanh",
    "Attention": "test_attention_4d_with_past_and_present_qk_matmul_bias_3d_mask_causal",
    "AveragePool": "test_averagepool_2d_precomputed_strides",
    "BatchNormalization": "test_batchnorm_example", "Cast": "test_cast_FLOAT_to_BFLOAT16",
    "CastLike": "test_castlike_FLOAT_to_FLOAT8E4M3FN", "Ceil": "test_ceil", "Celu": "test_celu",
    "CenterCropPad": "test_center_crop_pad_crop_axes_chw", "Clip": "test_clip_default_min",
    "Concat": "test_concat_2d_axis_negative_1", "Constant": "test_constant",
    "ConstantOfShape": "test_constantofshape_float_ones",
    "Conv": "test_conv_with_strides_no_padding",
    "ConvTranspose": "test_convtranspose_autopad_same", "Cos": "test_cos_example",
    "Cosh": "test_cosh", "DepthToSpace": "test_depthtospace_crd_mode_example", "Div": "test_div",
    "Dropout": "test_training_dropout", "Elu": "test_elu", "Erf": "test_erf", "Exp": "test_exp",
    "Expand": "test_expand_dim_changed", "FlexAttention": "test_flexattention",
    "Flatten": "test_flatten_axis0", "Floor": "test_floor",
    "GRU": "test_gru_batchwise", "Gather": "test_gather_0",
    "GatherElements": "test_gather_elements_0", "GatherND": "test_gathernd_example_float32",
    "Gelu": "test_gelu_default_2", "Gemm": "test_gemm_default_zero_bias",
    "GlobalAveragePool": "test_globalaveragepool_precomputed",
    "GlobalMaxPool": "test_globalmaxpool_precomputed", "Greater": "test_greater",
    "GreaterOrEqual": "test_greater_equal_bcast",
    "GroupNormalization": "test_group_normalization_example",
    "HardSigmoid": "test_hardsigmoid_example", "HardSwish": "test_hardswish",
    "Hardmax": "test_hardmax_default_axis", "Identity": "test_identity",
    "InstanceNormalization": "test_instancenorm_epsilon", "IsInf": "test_isinf",
    "IsNaN": "test_isnan", "LRN": "test_lrn", "LSTM": "test_lstm_defaults",
    "LeakyRelu": "test_leakyrelu_default", "Less": "test_less", "LessOrEqual": "test_less_equal",
    "Log": "test_log_example", "LogSoftmax": "test_logsoftmax_example_1",
    "LpNormalization": "test_l1normalization_axis_0", "LpPool": "test_lppool_2d_dilations",
    "MatMul": "test_matmul_2d", "Max": "test_max_one_input",
    "MaxPool": "test_maxpool_2d_ceil_output_size_reduce_by_one", "Mean": "test_mean_one_input",
    "Min": "test_min_example", "Mish": "test_mish", "Mod": "test_mod_mixed_sign_float32",
    "Mul": "test_mul_example", "Neg": "test_neg_example",
    "NegativeLogLikelihoodLoss": "test_nllloss_NCd1d2_reduction_sum",
    "OneHot": "test_onehot_negative_indices",
    "OptionalGetElement": "test_optional_get_element_tensor", "PRelu": "test_prelu_example",
    "Pow": "test_pow_types_float32_uint64", "RMSNormalization": "test_rms_normalization_2d_axis1",
    "RNN": "test_simple_rnn_batchwise", "Range": "test_range_float_type_positive_delta",
    "Reciprocal": "test_reciprocal_example",
    "ReduceL1": "test_reduce_l1_default_axes_keepdims_example",
    "ReduceL2": "test_reduce_l2_keep_dims_random", "ReduceLogSum": "test_reduce_log_sum_desc_axes",
    "ReduceMax": "test_reduce_max_negative_axes_keepdims_example",
    "ReduceMean": "test_reduce_mean_default_axes_keepdims_example",
    "ReduceMin": "test_reduce_min_keepdims_random",
    "ReduceProd": "test_reduce_prod_do_not_keepdims_example",
    "ReduceSum": "test_reduce_sum_empty_axes_input_noop_example",
    "ReduceSumSquare": "test_reduce_sum_square_keepdims_example", "Relu": "test_relu",
    "Reshape": "test_reshape_negative_extended_dims",
    "Resize": "test_resize_downsample_sizes_linear_antialias", "Round": "test_round",
    "Scatter": "test_scatter_without_axis",
    "ScatterElements": "test_scatter_elements_with_negative_indices",
    "ScatterND": "test_scatternd_min", "Selu": "test_selu", "Shape": "test_shape_start_1",
    "Shrink": "test_shrink_soft", "Sigmoid": "test_sigmoid_example", "Sign": "test_sign",
    "Sin": "test_sin_example", "Sinh": "test_sinh", "Size": "test_size", "Slice": "test_slice_neg",
    "Softmax": "test_softmax_negative_axis", "SoftmaxCrossEntropyLoss": "test_sce_none",
    "Softplus": "test_softplus_example", "Softsign": "test_softsign",
    "SpaceToDepth": "test_spacetodepth_dcr_mode_example",
    "Split": "test_split_1d_uneven_split_opset18", "Sqrt": "test_sqrt_example",
    "Squeeze": "test_squeeze", "Sub": "test_sub", "Sum": "test_sum_one_input",
    "SwiGLU": "test_swiglu_alpha", "Swish": "test_swish",
    "Tan": "test_tan_example", "Tanh": "test_tanh",
    "ThresholdedRelu": "test_thresholdedrelu_example", "Tile": "test_tile", "TopK": "test_top_k",
    "Transpose": "test_transpose_all_permutations_5", "Unsqueeze": "test_unsqueeze_unsorted_axes",
    "Where": "test_where_example",
}

#: op -> (node, inputs {name: (elem type, shape)}, outputs {name: (elem type, shape)}, opset)
F64_MODELS = {
    "EyeLike": (h.make_node("EyeLike", ["x"], ["y"], dtype=T.DOUBLE), {"x": (T.FLOAT, [3, 4])},
                {"y": (T.DOUBLE, [3, 4])}, 21),
    "BlackmanWindow": (h.make_node("BlackmanWindow", ["n"], ["y"], output_datatype=T.DOUBLE),
                       {"n": (T.INT64, [])}, {"y": (T.DOUBLE, [None])}, 21),
    "HammingWindow": (h.make_node("HammingWindow", ["n"], ["y"], output_datatype=T.DOUBLE),
                      {"n": (T.INT64, [])}, {"y": (T.DOUBLE, [None])}, 21),
    "HannWindow": (h.make_node("HannWindow", ["n"], ["y"], output_datatype=T.DOUBLE),
                   {"n": (T.INT64, [])}, {"y": (T.DOUBLE, [None])}, 21),
    "LayerNormalization": (h.make_node("LayerNormalization", ["x", "s"], ["y"]),
                           {"x": (T.DOUBLE, [2, 8]), "s": (T.DOUBLE, [8])},
                           {"y": (T.DOUBLE, [2, 8])}, 21),
    "Pad": (h.make_node("Pad", ["x", "p"], ["y"]), {"x": (T.DOUBLE, [3, 4]), "p": (T.INT64, [4])},
            {"y": (T.DOUBLE, [None, None])}, 21),
    "Trilu": (h.make_node("Trilu", ["x"], ["y"]), {"x": (T.DOUBLE, [3, 4])},
              {"y": (T.DOUBLE, [3, 4])}, 21),
    "Einsum": (h.make_node("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik"),
               {"a": (T.DOUBLE, [2, 3]), "b": (T.DOUBLE, [3, 4])}, {"y": (T.DOUBLE, [2, 4])}, 21),
    "Equal": (h.make_node("Equal", ["a", "b"], ["y"]),
              {"a": (T.DOUBLE, [2, 3]), "b": (T.DOUBLE, [2, 3])}, {"y": (T.BOOL, [2, 3])}, 21),
}

#: op -> a node-test case refused with a message naming the op
REFUSED_CASES = {
    "CumSum": "test_cumsum_1d", "CumProd": "test_cumprod_1d",
    "Resize": "test_resize_downsample_sizes_nearest_not_larger",
    "SpaceToDepth": "test_spacetodepth_crd_mode_example",
    "CausalConvWithState": "test_causal_conv_with_state_kernel_size_one",
    "LinearAttention": "test_linear_attention_fp16",
    "OptionalHasElement": "test_optional_has_element_optional_input",
}


_QLC_IN = [("x", T.UINT8, [1, 4, 5, 5]), ("xs", T.FLOAT, []), ("xz", T.UINT8, []),
           ("w", T.UINT8, [4, 4, 3, 3]), ("ws", T.FLOAT, []), ("wz", T.UINT8, []),
           ("ys", T.FLOAT, []), ("yz", T.UINT8, [])]

#: op -> (nodes, inputs [(name, elem type, shape)], outputs, words the refusal must contain);
#: every operand a graph input (run-time)
QUANT_REFUSED = {
    "ConvInteger": ([h.make_node("ConvInteger", ["x", "w", "xz"], ["y"], name="ci", group=2)],
                    [("x", T.UINT8, [1, 4, 5, 5]), ("w", T.UINT8, [4, 2, 3, 3]),
                     ("xz", T.UINT8, [])], [("y", T.INT32, [1, 4, 3, 3])], ["group=2", "initializer"]),
    "DequantizeLinear": ([h.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], name="dq")],
                         [("x", T.INT8, [4]), ("s", T.BFLOAT16, []), ("z", T.INT8, [])],
                         [("y", T.BFLOAT16, [4])], ["bfloat16 scale", "float32"]),
    "MatMulInteger": ([h.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"], name="mmi")],
                      [("a", T.UINT8, [2, 300]), ("b", T.UINT8, [300, 2]), ("za", T.UINT8, [1]),
                       ("zb", T.UINT8, [1])], [("y", T.INT32, [2, 2])],
                      ["reduction length 300", "initializer"]),
    "QLinearConv": ([h.make_node("QLinearConv", [n for n, _, _ in _QLC_IN] + ["b"], ["y"],
                                 name="qlc")], _QLC_IN + [("b", T.INT32, [4])],
                    [("y", T.UINT8, [1, 4, 3, 3])], ["bias", "initializer"]),
    "QLinearMatMul": ([h.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
                                   ["y"], name="qlmm")],
                      [("a", T.UINT8, [2, 300]), ("as", T.FLOAT, []), ("az", T.UINT8, []),
                       ("b", T.UINT8, [300, 2]), ("bs", T.FLOAT, []), ("bz", T.UINT8, []),
                       ("ys", T.FLOAT, []), ("yz", T.UINT8, [])], [("y", T.UINT8, [2, 2])],
                      ["reduction length 300", "initializer"]),
    "QuantizeLinear": ([h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="ql"),
                        h.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])],
                       [("x", T.FLOAT, [4]), ("s", T.FLOAT, []), ("z", T.UINT16, [])],
                       [("y", T.FLOAT, [4])], ["uint16", "graph output"]),
}


@functools.cache
def _cases() -> dict:
    return {tc.name: tc for tc in node_tests.collect()}


def _widen(model):
    """``model`` with every float32 tensor float64 (graph inputs/outputs/value infos, initializers,
    tensor attributes)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for v in list(g.input) + list(g.output) + list(g.value_info):
        if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type == T.FLOAT:
            v.type.tensor_type.elem_type = T.DOUBLE
    for i, init in enumerate(list(g.initializer)):
        if init.data_type == T.FLOAT:
            g.initializer[i].CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(init).astype(np.float64), init.name))
    for node in g.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == T.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float64),
                                                     a.t.name))
    return m


def _refused(model, inputs, op: str) -> str:
    with pytest.raises(M100Error) as ei:
        rep = M100Backend.prepare(model, machine="tiny")
        rep.run(inputs)
    msg = str(ei.value)
    assert msg.strip() and "\n" not in msg.strip(), msg
    assert op in msg, f"the refusal does not name {op}: {msg}"
    return msg


@pytest.mark.onnx_op(*F64_CASES, kind="negative")
@pytest.mark.parametrize("op", sorted(F64_CASES))
def test_float64_variant_refused_naming_the_op(op):
    tc = _cases()[F64_CASES[op]]
    assert tc.model.graph.node[0].op_type == op
    m = _widen(tc.model)
    onnx.checker.check_model(m, full_check=True)  # a valid float64 model of the op
    from onnx.backend.test.runner import _normalize_tensor
    inputs = [np.asarray(x).astype(np.float64) if np.asarray(x).dtype == np.float32 else x
              for x in map(_normalize_tensor, tc.data_sets[0][0])]
    msg = _refused(m, inputs, op)
    assert "float64" in msg


@pytest.mark.onnx_op(*F64_MODELS, kind="negative")
@pytest.mark.parametrize("op", sorted(F64_MODELS))
def test_float64_model_refused_naming_the_op(op):
    node, ins, outs, opset = F64_MODELS[op]
    g = h.make_graph([node], "t", [h.make_tensor_value_info(n, t, s) for n, (t, s) in ins.items()],
                     [h.make_tensor_value_info(n, t, s) for n, (t, s) in outs.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    onnx.checker.check_model(m, full_check=True)
    rng = np.random.default_rng(0)
    inputs = [np.array(4, np.int64) if t == T.INT64 and not s else
              np.array([1, 0, 0, 2], np.int64) if t == T.INT64 else
              rng.standard_normal(s).astype(helper_np(t)) for t, s in ins.values()]
    assert "float64" in _refused(m, inputs, op)


@pytest.mark.onnx_op("MeanVarianceNormalization", kind="negative")
def test_float64_mvn_refused_naming_the_op():
    """float64 MeanVarianceNormalization (a type its schema allows; ``full_check`` fails only
    inside onnx's own function body, which adds a float32 epsilon) is refused in one line."""
    node = h.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=[0, 2, 3])
    g = h.make_graph([node], "t", [h.make_tensor_value_info("x", T.DOUBLE, [2, 3, 4, 5])],
                     [h.make_tensor_value_info("y", T.DOUBLE, [2, 3, 4, 5])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    onnx.checker.check_model(m)
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5))
    assert "float64" in _refused(m, [x], "MeanVarianceNormalization")


def helper_np(t):
    return h.tensor_dtype_to_np_dtype(t)


@pytest.mark.onnx_op(*REFUSED_CASES, kind="negative")
@pytest.mark.parametrize("op", sorted(REFUSED_CASES))
def test_refused_variant_names_the_op(op):
    name = REFUSED_CASES[op]
    outcome, msg = node_tests.run_case(_cases()[name])
    assert outcome == "unsupported", f"{name}: {outcome}: {msg}"
    assert msg.strip() and "\n" not in msg.strip() and op in msg, msg


@pytest.mark.onnx_op(*QUANT_REFUSED, kind="negative")
@pytest.mark.parametrize("op", sorted(QUANT_REFUSED))
def test_quantized_variant_refused_naming_the_op(op):
    nodes, ins, outs, words = QUANT_REFUSED[op]
    g = h.make_graph(nodes, "t", [h.make_tensor_value_info(n, t, s) for n, t, s in ins],
                     [h.make_tensor_value_info(n, t, s) for n, t, s in outs])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 21)])
    onnx.checker.check_model(m, full_check=True)
    rng = np.random.default_rng(0)
    inputs = [rng.integers(0, 100, s).astype(helper_np(t)) if t != T.FLOAT
              else rng.uniform(0.5, 1, s).astype(np.float32) for _, t, s in ins]
    msg = _refused(m, inputs, op)
    assert f"{op} '{nodes[0].name}'" in msg, msg  # the node, by name
    assert all(w in msg for w in words), msg
