// RUN: m100-opt %s | filecheck %s
// RUN: m100-opt %s --print-op-generic | m100-opt | filecheck %s
// MLIR's !quant.uniform syntax: per-tensor, per-axis, storage ranges, i4/u4/u8, printed like MLIR.

func.func @types(%a: tensor<4x3xf32>) -> tensor<4x3xf32> {
  %q = quant.qcast %a : tensor<4x3xf32> to tensor<4x3x!quant.uniform<i8:f32, 0.0125:-3>>
  %s = quant.scast %q : tensor<4x3x!quant.uniform<i8:f32, 0.0125:-3>> to tensor<4x3xi8>
  %p = quant.scast %s : tensor<4x3xi8> to tensor<4x3x!quant.uniform<i8<-127:127>:f32:1, {2.0:1, 3.0, 0.5:-4}>>
  %u = quant.dcast %p : tensor<4x3x!quant.uniform<i8<-127:127>:f32:1, {2.0:1, 3.0, 0.5:-4}>> to tensor<4x3xf32>
  %x = "test.op"() : () -> tensor<8x!quant.uniform<u4:f16, 1.5:7>>
  %y = "test.op"() : () -> tensor<8x!quant.uniform<ui8:f32, 1:7>>
  %z = "test.op"() : () -> tensor<8x!quant.uniform<i4:bf16, 0.1>>
  %w = "test.op"() : () -> tensor<8x!quant.uniform<i8:f32, 0.0078431372549019607>>
  %v = "test.op"() : () -> tensor<2x16x!quant.uniform<u8<1:254>:f32:0, {1.0e-3:128, 2.5e-4:1}>>
  func.return %u : tensor<4x3xf32>
}
// CHECK-LABEL: func.func @types
// CHECK-NEXT: %q = quant.qcast %a : tensor<4x3xf32> to tensor<4x3x!quant.uniform<i8:f32, 1.250000e-02:-3>>
// CHECK-NEXT: %s = quant.scast %q : tensor<4x3x!quant.uniform<i8:f32, 1.250000e-02:-3>> to tensor<4x3xi8>
// CHECK-NEXT: %p = quant.scast %s : tensor<4x3xi8> to tensor<4x3x!quant.uniform<i8<-127:127>:f32:1, {2.000000e+00:1, 3.000000e+00, 5.000000e-01:-4}>>
// CHECK-NEXT: %u = quant.dcast %p : tensor<4x3x!quant.uniform<i8<-127:127>:f32:1, {2.000000e+00:1, 3.000000e+00, 5.000000e-01:-4}>> to tensor<4x3xf32>
// CHECK-NEXT: tensor<8x!quant.uniform<u4:f16, 1.500000e+00:7>>
// uiN is read as uN (MLIR does the same)
// CHECK-NEXT: tensor<8x!quant.uniform<u8:f32, 1.000000e+00:7>>
// CHECK-NEXT: tensor<8x!quant.uniform<i4:bf16, 1.000000e-01>>
// a scale that 6 digits do not represent exactly keeps all its digits
// CHECK-NEXT: tensor<8x!quant.uniform<i8:f32, 7.84313725490196e-03>>
// CHECK-NEXT: tensor<2x16x!quant.uniform<u8<1:254>:f32:0, {1.000000e-03:128, 2.500000e-04:1}>>
