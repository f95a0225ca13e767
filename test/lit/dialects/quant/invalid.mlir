// RUN: m100-opt %s --split-input-file --parsing-diagnostics --verify-diagnostics | filecheck %s
// Negative tests: the !quant.uniform verifiers and the quant cast ops.

%x = "test.op"() : () -> tensor<8x!quant.uniform<i8:f32, -1.0>>
// CHECK: !quant.uniform: illegal scale: -1.0 (must be finite and > 0)

// -----

%x = "test.op"() : () -> tensor<8x!quant.uniform<i8:f32, 0.0>>
// CHECK: !quant.uniform: illegal scale: 0.0 (must be finite and > 0)

// -----

%x = "test.op"() : () -> tensor<8x!quant.uniform<i8:f32, 1.0:200>>
// CHECK: !quant.uniform: illegal zero point 200: outside the storage range [-128, 127]

// -----

%x = "test.op"() : () -> tensor<8x!quant.uniform<u4:f32, 1.0:-1>>
// CHECK: !quant.uniform: illegal zero point -1: outside the storage range [0, 15]

// -----

%x = "test.op"() : () -> tensor<8x!quant.uniform<i8<-200:127>:f32, 1.0>>
// CHECK: !quant.uniform: illegal storage min and storage max: (-200:127) (need -128 <= min < max <= 127 for i8)

// -----

%x = "test.op"() : () -> tensor<8x!quant.uniform<i64:f32, 1.0>>
// CHECK: !quant.uniform: illegal storage type size: 64 (1..32)

// -----

%x = "test.op"() : () -> tensor<8x!quant.uniform<f16:f32, 1.0>>
// CHECK: !quant.uniform: storage type must be an integer (iN or uN), not f16

// -----

%x = "test.op"() : () -> tensor<8x!quant.uniform<x8:f32, 1.0>>
// CHECK: !quant.uniform: expected a storage type (iN or uN)

// -----

%x = "test.op"() : () -> tensor<8x!quant.uniform<i8:i32, 1.0>>
// CHECK: !quant.uniform: expressed type must be floating point, not i32

// -----

%x = "test.op"() : () -> tensor<8x!quant.uniform<i8:f32:0, {1.0, -2.0}>>
// CHECK: !quant.uniform (per-axis): illegal scale: -2.0 (must be finite and > 0)

// -----

%a = "test.op"() : () -> tensor<4x3xf32>
%q = quant.qcast %a : tensor<4x3xf32> to tensor<4x3x!quant.uniform<i8:f32:1, {1.0, 2.0}>>
// CHECK: quant.qcast: dimension 1 has size 3 but the type has 2 scales

// -----

%a = "test.op"() : () -> tensor<4x3xf32>
%q = quant.qcast %a : tensor<4x3xf32> to tensor<4x3x!quant.uniform<i8:f32:2, {1.0, 2.0}>>
// CHECK: quant.qcast: quantized dimension 2 is out of range for rank 2

// -----

%a = "test.op"() : () -> tensor<4x3xf16>
%q = quant.qcast %a : tensor<4x3xf16> to tensor<4x3x!quant.uniform<i8:f32, 1.0>>
// CHECK: quant.qcast: input element type f16 must be the expressed type f32

// -----

%a = "test.op"() : () -> tensor<4x3xf32>
%q = quant.qcast %a : tensor<4x3xf32> to tensor<4x2x!quant.uniform<i8:f32, 1.0>>
// CHECK: quant.qcast: input tensor<4x3xf32> and result tensor<4x2x!quant.uniform<i8:f32, 1.000000e+00>> must have the same shape

// -----

%a = "test.op"() : () -> tensor<4xi8>
%q = quant.dcast %a : tensor<4xi8> to tensor<4xf32>
// CHECK: quant.dcast: input element type must be !quant.uniform, not i8

// -----

%a = "test.op"() : () -> tensor<4x!quant.uniform<i4:f32, 1.0>>
%q = quant.scast %a : tensor<4x!quant.uniform<i4:f32, 1.0>> to tensor<4xi8>
// CHECK: quant.scast: the integer side must be the storage type i4, not i8

// -----

%a = "test.op"() : () -> tensor<4xi8>
%q = quant.scast %a : tensor<4xi8> to tensor<4xi8>
// CHECK: quant.scast: exactly one of tensor<4xi8> and tensor<4xi8> must be quantized
