// RUN: m100-opt %s | filecheck %s
// RUN: m100-opt %s --print-op-generic | filecheck %s --check-prefix=GEN
// RUN: m100-opt %s --print-op-generic | m100-opt | filecheck %s
// Mixed-type contractions parse and print in the named and the generic form; the hidden bodies are
// upstream's cast_signed ones (extsi / extf / sitofp before the multiply-accumulate).

func.func @mm_i8(%a: tensor<4x8xi8>, %b: tensor<8x4xi8>, %c: tensor<4x4xi32>) -> tensor<4x4xi32> {
  %r = linalg.matmul ins(%a, %b : tensor<4x8xi8>, tensor<8x4xi8>) outs(%c : tensor<4x4xi32>) -> tensor<4x4xi32>
  func.return %r : tensor<4x4xi32>
}
// CHECK-LABEL: func.func @mm_i8
// CHECK-NEXT: %r = linalg.matmul ins(%a, %b : tensor<4x8xi8>, tensor<8x4xi8>) outs(%c : tensor<4x4xi32>) -> tensor<4x4xi32>
// GEN-LABEL: "func.func"() <{sym_name = "mm_i8"
// GEN:      ^bb0(%[[A:.*]]: i8, %[[B:.*]]: i8, %[[C:.*]]: i32):
// GEN-NEXT:   %[[EA:.*]] = "arith.extsi"(%[[A]]) : (i8) -> i32
// GEN-NEXT:   %[[EB:.*]] = "arith.extsi"(%[[B]]) : (i8) -> i32
// GEN-NEXT:   %[[M:.*]] = "arith.muli"(%[[EA]], %[[EB]])
// GEN-NEXT:   %[[S:.*]] = "arith.addi"(%[[C]], %[[M]])
// GEN-NEXT:   "linalg.yield"(%[[S]]) : (i32) -> ()

func.func @mm_f16(%a: tensor<4x8xf16>, %b: tensor<8x4xf16>, %c: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %r = linalg.matmul ins(%a, %b : tensor<4x8xf16>, tensor<8x4xf16>) outs(%c : tensor<4x4xf32>) -> tensor<4x4xf32>
  func.return %r : tensor<4x4xf32>
}
// CHECK-LABEL: func.func @mm_f16
// CHECK-NEXT: linalg.matmul ins(%a, %b : tensor<4x8xf16>, tensor<8x4xf16>) outs(%c : tensor<4x4xf32>) -> tensor<4x4xf32>
// GEN-LABEL: "func.func"() <{sym_name = "mm_f16"
// GEN:      ^bb0(%{{.*}}: f16, %{{.*}}: f16, %{{.*}}: f32):
// GEN-NEXT:   "arith.extf"(%{{.*}}) : (f16) -> f32
// GEN-NEXT:   "arith.extf"(%{{.*}}) : (f16) -> f32
// GEN-NEXT:   "arith.mulf"
// GEN-NEXT:   "arith.addf"

func.func @mm_i8_i4(%a: tensor<4x8xi8>, %b: tensor<8x4xi4>, %c: tensor<4x4xi32>) -> tensor<4x4xi32> {
  %r = linalg.matmul ins(%a, %b : tensor<4x8xi8>, tensor<8x4xi4>) outs(%c : tensor<4x4xi32>) -> tensor<4x4xi32>
  func.return %r : tensor<4x4xi32>
}
// CHECK-LABEL: func.func @mm_i8_i4
// GEN-LABEL: "func.func"() <{sym_name = "mm_i8_i4"
// GEN:        "arith.extsi"(%{{.*}}) : (i8) -> i32
// GEN-NEXT:   "arith.extsi"(%{{.*}}) : (i4) -> i32

func.func @mm_f16_i4(%a: tensor<4x8xf16>, %b: tensor<8x4xi4>, %c: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %r = linalg.matmul ins(%a, %b : tensor<4x8xf16>, tensor<8x4xi4>) outs(%c : tensor<4x4xf32>) -> tensor<4x4xf32>
  func.return %r : tensor<4x4xf32>
}
// GEN-LABEL: "func.func"() <{sym_name = "mm_f16_i4"
// GEN:        "arith.extf"(%{{.*}}) : (f16) -> f32
// GEN-NEXT:   "arith.sitofp"(%{{.*}}) : (i4) -> f32

func.func @conv_i8(%x: tensor<1x3x6x6xi8>, %w: tensor<4x3x3x3xi8>, %o: tensor<1x4x4x4xi32>) -> tensor<1x4x4x4xi32> {
  %r = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%x, %w : tensor<1x3x6x6xi8>, tensor<4x3x3x3xi8>) outs(%o : tensor<1x4x4x4xi32>) -> tensor<1x4x4x4xi32>
  func.return %r : tensor<1x4x4x4xi32>
}
// CHECK-LABEL: func.func @conv_i8
// CHECK-NEXT: linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%x, %w : tensor<1x3x6x6xi8>, tensor<4x3x3x3xi8>) outs(%o : tensor<1x4x4x4xi32>) -> tensor<1x4x4x4xi32>

func.func @conv_f16(%x: tensor<1x3x6x6xf16>, %w: tensor<4x3x3x3xf16>, %o: tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32> {
  %r = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%x, %w : tensor<1x3x6x6xf16>, tensor<4x3x3x3xf16>) outs(%o : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  func.return %r : tensor<1x4x4x4xf32>
}
// CHECK-LABEL: func.func @conv_f16
// GEN-LABEL: "func.func"() <{sym_name = "conv_f16"
// GEN:        "arith.extf"(%{{.*}}) : (f16) -> f32

func.func @qmm(%a: tensor<4x8xi8>, %b: tensor<8x4xi8>, %za: i32, %zb: i32, %c: tensor<4x4xi32>) -> tensor<4x4xi32> {
  %r = linalg.quantized_matmul ins(%a, %b, %za, %zb : tensor<4x8xi8>, tensor<8x4xi8>, i32, i32) outs(%c : tensor<4x4xi32>) -> tensor<4x4xi32>
  func.return %r : tensor<4x4xi32>
}
// CHECK-LABEL: func.func @qmm
// CHECK-NEXT: linalg.quantized_matmul ins(%a, %b, %za, %zb : tensor<4x8xi8>, tensor<8x4xi8>, i32, i32) outs(%c : tensor<4x4xi32>) -> tensor<4x4xi32>

// The generic linalg.generic form of the same i8 contraction (what torch-mlir prints) stays as is.
#mA = affine_map<(m, n, k) -> (m, k)>
#mB = affine_map<(m, n, k) -> (k, n)>
#mC = affine_map<(m, n, k) -> (m, n)>
func.func @generic_i8(%a: tensor<4x8xi8>, %b: tensor<8x4xi8>, %c: tensor<4x4xi32>) -> tensor<4x4xi32> {
  %r = linalg.generic {indexing_maps = [#mA, #mB, #mC], iterator_types = ["parallel", "parallel", "reduction"]} ins(%a, %b : tensor<4x8xi8>, tensor<8x4xi8>) outs(%c : tensor<4x4xi32>) {
  ^bb0(%x: i8, %y: i8, %z: i32):
    %ex = arith.extsi %x : i8 to i32
    %ey = arith.extsi %y : i8 to i32
    %p = arith.muli %ex, %ey : i32
    %s = arith.addi %z, %p : i32
    linalg.yield %s : i32
  } -> tensor<4x4xi32>
  func.return %r : tensor<4x4xi32>
}
// CHECK-LABEL: func.func @generic_i8
// CHECK:       linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%a, %b : tensor<4x8xi8>, tensor<8x4xi8>) outs(%c : tensor<4x4xi32>) {
// CHECK:         arith.extsi %x : i8 to i32
