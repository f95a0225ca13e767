// RUN: m100-opt %s -p fold-quantized-contractions | filecheck %s
// dcast -> float conv/matmul -> qcast chains (onnxruntime's QDQ form after raise-quant-casts)
// become i8 x i8 -> i32 contractions + a requantize generic; what does not match stays float.

!xq = !quant.uniform<i8:f32, 5.000000e-01:3>
!wq = !quant.uniform<i8:f32:0, {2.500000e-01, 1.250000e-01}>
!bq = !quant.uniform<i32:f32:0, {1.250000e-01, 6.250000e-02}>
!yq = !quant.uniform<i8:f32, 2.000000e+00:-128>

func.func @conv(%x: tensor<1x1x4x4x!xq>) -> tensor<1x2x4x4x!yq> {
  %w8 = arith.constant dense<[[[[1, 2, 3], [4, 5, 6], [7, 8, 9]]], [[[-1, -2, -3], [-4, -5, -6], [-7, -8, -9]]]]> : tensor<2x1x3x3xi8>
  %b32 = arith.constant dense<[10, -20]> : tensor<2xi32>
  %zero = arith.constant 0.0 : f32
  %xf = quant.dcast %x : tensor<1x1x4x4x!xq> to tensor<1x1x4x4xf32>
  %xp = tensor.pad %xf low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):
    tensor.yield %zero : f32
  } : tensor<1x1x4x4xf32> to tensor<1x1x6x6xf32>
  %wq = quant.scast %w8 : tensor<2x1x3x3xi8> to tensor<2x1x3x3x!wq>
  %wf = quant.dcast %wq : tensor<2x1x3x3x!wq> to tensor<2x1x3x3xf32>
  %bq = quant.scast %b32 : tensor<2xi32> to tensor<2x!bq>
  %bf = quant.dcast %bq : tensor<2x!bq> to tensor<2xf32>
  %e = tensor.empty() : tensor<1x2x4x4xf32>
  %init = linalg.broadcast ins(%bf : tensor<2xf32>) outs(%e : tensor<1x2x4x4xf32>) dimensions = [0, 2, 3]
  %y = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%xp, %wf : tensor<1x1x6x6xf32>, tensor<2x1x3x3xf32>) outs(%init : tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %yq = quant.qcast %y : tensor<1x2x4x4xf32> to tensor<1x2x4x4x!yq>
  func.return %yq : tensor<1x2x4x4x!yq>
}
// bias - zx * sum(w) per channel: 10 - 3*45 = -125, -20 - 3*(-45) = 115; pad with zx = 3;
// multipliers 0.5 * [0.25, 0.125] / 2 = [0.0625, 0.03125]; zero point -128.
// CHECK-LABEL: func.func @conv
// CHECK:       %[[XI:.*]] = quant.scast %x : tensor<1x1x4x4x!quant.uniform<i8:f32, 5.000000e-01:3>> to tensor<1x1x4x4xi8>
// CHECK:       %[[Z:.*]] = arith.constant 3 : i8
// CHECK:       %[[P:.*]] = tensor.pad %[[XI]] low[0, 0, 1, 1] high[0, 0, 1, 1]
// CHECK-NEXT:  ^{{.*}}(%{{.*}}: index, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index):
// CHECK-NEXT:    tensor.yield %[[Z]] : i8
// CHECK-NEXT:  } : tensor<1x1x4x4xi8> to tensor<1x1x6x6xi8>
// CHECK:       arith.constant dense<[-125, 115]> : tensor<2xi32>
// CHECK:       %[[INIT:.*]] = linalg.broadcast ins(%{{.*}}:tensor<2xi32>) outs(%{{.*}}:tensor<1x2x4x4xi32>) dimensions = [0, 2, 3]
// CHECK:       %[[ACC:.*]] = linalg.conv_2d_nchw_fchw {{{.*}}} ins(%[[P]], %w8 : tensor<1x1x6x6xi8>, tensor<2x1x3x3xi8>) outs(%[[INIT]] : tensor<1x2x4x4xi32>) -> tensor<1x2x4x4xi32>
// CHECK:       arith.constant -1.280000e+02 : f32
// CHECK:       arith.constant dense<[6.250000e-02, 3.125000e-02]> : tensor<2xf32>
// CHECK:       %[[R:.*]] = linalg.generic {{.*}} ins(%[[ACC]], %{{.*}} : tensor<1x2x4x4xi32>, tensor<2xf32>) outs(%{{.*}} : tensor<1x2x4x4xi8>)
// CHECK:         arith.sitofp
// CHECK-NEXT:    arith.mulf
// CHECK-NEXT:    math.roundeven
// CHECK-NEXT:    arith.addf
// CHECK-NEXT:    arith.maximumf
// CHECK-NEXT:    arith.minimumf
// CHECK-NEXT:    arith.fptosi
// CHECK:       %[[Y:.*]] = quant.scast %[[R]] : tensor<1x2x4x4xi8> to tensor<1x2x4x4x!quant.uniform<i8:f32, 2.000000e+00:-128>>
// CHECK-NEXT:  func.return %[[Y]]
// CHECK-NOT:   linalg.conv_2d_nchw_fchw {{.*}}f32

!mq = !quant.uniform<i8:f32:1, {2.500000e-01, 1.250000e-01}>
!aq = !quant.uniform<i8:f32, 1.000000e+00>
func.func @matmul(%a: tensor<2x3x!aq>) -> tensor<2x2x!yq> {
  %w8 = arith.constant dense<[[1, 2], [3, 4], [5, 6]]> : tensor<3x2xi8>
  %zero = arith.constant 0.0 : f32
  %af = quant.dcast %a : tensor<2x3x!aq> to tensor<2x3xf32>
  %wq = quant.scast %w8 : tensor<3x2xi8> to tensor<3x2x!mq>
  %wf = quant.dcast %wq : tensor<3x2x!mq> to tensor<3x2xf32>
  %e = tensor.empty() : tensor<2x2xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<2x2xf32>) -> tensor<2x2xf32>
  %y = linalg.matmul ins(%af, %wf : tensor<2x3xf32>, tensor<3x2xf32>) outs(%f : tensor<2x2xf32>) -> tensor<2x2xf32>
  %yq = quant.qcast %y : tensor<2x2xf32> to tensor<2x2x!yq>
  func.return %yq : tensor<2x2x!yq>
}
// CHECK-LABEL: func.func @matmul
// CHECK:       %[[AI:.*]] = quant.scast %a
// CHECK:       %[[F:.*]] = linalg.fill ins(%{{.*}} : i32) outs(%{{.*}} : tensor<2x2xi32>)
// CHECK:       linalg.matmul ins(%[[AI]], %w8 : tensor<2x3xi8>, tensor<3x2xi8>) outs(%[[F]] : tensor<2x2xi32>) -> tensor<2x2xi32>
// CHECK:       arith.constant dense<[1.250000e-01, 6.250000e-02]> : tensor<2xf32>

// Negatives: asymmetric weights (zero point -1), a float bias, and a result that is not
// quantized directly -- all stay float.
!wa = !quant.uniform<i8:f32:1, {2.500000e-01, 1.250000e-01:-1}>
func.func @negative(%a: tensor<2x3x!aq>, %bias: tensor<2x2xf32>) -> (tensor<2x2x!yq>, tensor<2x2x!yq>, tensor<2x2xf32>) {
  %w8 = arith.constant dense<[[1, 2], [3, 4], [5, 6]]> : tensor<3x2xi8>
  %zero = arith.constant 0.0 : f32
  %af = quant.dcast %a : tensor<2x3x!aq> to tensor<2x3xf32>
  %wa = quant.scast %w8 : tensor<3x2xi8> to tensor<3x2x!wa>
  %waf = quant.dcast %wa : tensor<3x2x!wa> to tensor<3x2xf32>
  %e = tensor.empty() : tensor<2x2xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<2x2xf32>) -> tensor<2x2xf32>
  %y1 = linalg.matmul ins(%af, %waf : tensor<2x3xf32>, tensor<3x2xf32>) outs(%f : tensor<2x2xf32>) -> tensor<2x2xf32>
  %q1 = quant.qcast %y1 : tensor<2x2xf32> to tensor<2x2x!yq>
  %wq = quant.scast %w8 : tensor<3x2xi8> to tensor<3x2x!mq>
  %wf = quant.dcast %wq : tensor<3x2x!mq> to tensor<3x2xf32>
  %y2 = linalg.matmul ins(%af, %wf : tensor<2x3xf32>, tensor<3x2xf32>) outs(%bias : tensor<2x2xf32>) -> tensor<2x2xf32>
  %q2 = quant.qcast %y2 : tensor<2x2xf32> to tensor<2x2x!yq>
  %y3 = linalg.matmul ins(%af, %wf : tensor<2x3xf32>, tensor<3x2xf32>) outs(%f : tensor<2x2xf32>) -> tensor<2x2xf32>
  func.return %q1, %q2, %y3 : tensor<2x2x!yq>, tensor<2x2x!yq>, tensor<2x2xf32>
}
// CHECK-LABEL: func.func @negative
// CHECK-NOT:   xi8>, tensor<3x2xi8>
// CHECK:       %y1 = linalg.matmul ins(%af, %waf : tensor<2x3xf32>, tensor<3x2xf32>)
// CHECK:       %y2 = linalg.matmul ins(%af, %wf : tensor<2x3xf32>, tensor<3x2xf32>)
// CHECK:       %y3 = linalg.matmul ins(%af, %wf : tensor<2x3xf32>, tensor<3x2xf32>)
// CHECK-NOT:   xi8>, tensor<3x2xi8>

// A ReLU between the contraction and the QuantizeLinear becomes an i32 ReLU on the accumulator.
func.func @matmul_relu(%a: tensor<2x3x!aq>) -> tensor<2x2x!yq> {
  %w8 = arith.constant dense<[[1, -2], [3, 4], [-5, 6]]> : tensor<3x2xi8>
  %zero = arith.constant 0.0 : f32
  %af = quant.dcast %a : tensor<2x3x!aq> to tensor<2x3xf32>
  %wq = quant.scast %w8 : tensor<3x2xi8> to tensor<3x2x!mq>
  %wf = quant.dcast %wq : tensor<3x2x!mq> to tensor<3x2xf32>
  %e = tensor.empty() : tensor<2x2xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<2x2xf32>) -> tensor<2x2xf32>
  %y = linalg.matmul ins(%af, %wf : tensor<2x3xf32>, tensor<3x2xf32>) outs(%f : tensor<2x2xf32>) -> tensor<2x2xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%y : tensor<2x2xf32>) outs(%e : tensor<2x2xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.maximumf %in, %zero : f32
    linalg.yield %m : f32
  } -> tensor<2x2xf32>
  %yq = quant.qcast %r : tensor<2x2xf32> to tensor<2x2x!yq>
  func.return %yq : tensor<2x2x!yq>
}
// CHECK-LABEL: func.func @matmul_relu
// CHECK:       %[[ACC:.*]] = linalg.matmul ins(%{{.*}}, %w8 : tensor<2x3xi8>, tensor<3x2xi8>)
// CHECK:       %[[R:.*]] = linalg.generic {{.*}} ins(%[[ACC]] : tensor<2x2xi32>) outs(%{{.*}} : tensor<2x2xi32>)
// CHECK-NEXT:  ^{{.*}}(%[[X:.*]]: i32, %{{.*}}: i32):
// CHECK-NEXT:    arith.maxsi %[[X]], %{{.*}} : i32
// CHECK:       linalg.generic {{.*}} ins(%[[R]], %{{.*}} : tensor<2x2xi32>, tensor<2xf32>)
// CHECK-NOT:   arith.maximumf %in

// Gemm(transB) as torch-mlir lowers it: a transposed dequantized constant, then the int32 bias
// (scale x_scale * w_scale) added after the product. The transpose moves onto the constant.
!gq = !quant.uniform<i8:f32:0, {2.500000e-01, 1.250000e-01}>
!gb = !quant.uniform<i32:f32:0, {2.500000e-01, 1.250000e-01}>
func.func @gemm(%a: tensor<2x3x!aq>) -> tensor<2x2x!yq> {
  %w8 = arith.constant dense<[[1, 3, -5], [-2, 4, 6]]> : tensor<2x3xi8>
  %b32 = arith.constant dense<[7, -9]> : tensor<2xi32>
  %zero = arith.constant 0.0 : f32
  %af = quant.dcast %a : tensor<2x3x!aq> to tensor<2x3xf32>
  %wq = quant.scast %w8 : tensor<2x3xi8> to tensor<2x3x!gq>
  %wf = quant.dcast %wq : tensor<2x3x!gq> to tensor<2x3xf32>
  %bq = quant.scast %b32 : tensor<2xi32> to tensor<2x!gb>
  %bf = quant.dcast %bq : tensor<2x!gb> to tensor<2xf32>
  %et = tensor.empty() : tensor<3x2xf32>
  %wt = linalg.transpose ins(%wf : tensor<2x3xf32>) outs(%et : tensor<3x2xf32>) permutation = [1, 0]
  %e = tensor.empty() : tensor<2x2xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<2x2xf32>) -> tensor<2x2xf32>
  %y = linalg.matmul ins(%af, %wt : tensor<2x3xf32>, tensor<3x2xf32>) outs(%f : tensor<2x2xf32>) -> tensor<2x2xf32>
  %yb = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%y, %bf : tensor<2x2xf32>, tensor<2xf32>) outs(%e : tensor<2x2xf32>) {
  ^bb0(%in: f32, %bi: f32, %out: f32):
    %s = arith.addf %in, %bi : f32
    linalg.yield %s : f32
  } -> tensor<2x2xf32>
  %yq = quant.qcast %yb : tensor<2x2xf32> to tensor<2x2x!yq>
  func.return %yq : tensor<2x2x!yq>
}
// CHECK-LABEL: func.func @gemm
// CHECK:       %[[WT:.*]] = arith.constant dense<{{\[}}[1, -2], [3, 4], [-5, 6]]> : tensor<3x2xi8>
// CHECK:       arith.constant dense<[7, -9]> : tensor<2xi32>
// CHECK:       linalg.matmul ins(%{{.*}}, %[[WT]] : tensor<2x3xi8>, tensor<3x2xi8>) outs(%{{.*}} : tensor<2x2xi32>)
// CHECK-NOT:   linalg.transpose
// CHECK-NOT:   arith.addf %in

// torch-mlir's own per-tensor form: quantized_matmul(x, W, za, 0) -> i32 accumulator dequantized
// (scale s_x * s_w) -> QuantizeLinear: the zero point moves into the bias, the requant is
// m = s_acc / s_y.
!accq = !quant.uniform<i32:f32, 5.000000e-01>
func.func @qmm_per_tensor(%x: tensor<2x3xi8>) -> tensor<2x2x!yq> {
  %w8 = arith.constant dense<[[1, 2], [3, 4], [5, 6]]> : tensor<3x2xi8>
  %za = arith.constant 5 : i32
  %zb = arith.constant 0 : i32
  %e = tensor.empty() : tensor<2x2xi32>
  %f = linalg.fill ins(%zb : i32) outs(%e : tensor<2x2xi32>) -> tensor<2x2xi32>
  %acc = linalg.quantized_matmul ins(%x, %w8, %za, %zb : tensor<2x3xi8>, tensor<3x2xi8>, i32, i32) outs(%f : tensor<2x2xi32>) -> tensor<2x2xi32>
  %aq = quant.scast %acc : tensor<2x2xi32> to tensor<2x2x!accq>
  %af = quant.dcast %aq : tensor<2x2x!accq> to tensor<2x2xf32>
  %yq = quant.qcast %af : tensor<2x2xf32> to tensor<2x2x!yq>
  func.return %yq : tensor<2x2x!yq>
}
// -za * colsum(W) = -5 * [9, 12]; m = 0.5 / 2.0
// CHECK-LABEL: func.func @qmm_per_tensor
// CHECK:       arith.constant dense<[-45, -60]> : tensor<2xi32>
// CHECK:       %[[ACC:.*]] = linalg.matmul ins(%x, %w8 : tensor<2x3xi8>, tensor<3x2xi8>) outs(%{{.*}} : tensor<2x2xi32>)
// CHECK:       arith.constant 2.500000e-01 : f32
// CHECK:       linalg.generic {{.*}} ins(%[[ACC]] : tensor<2x2xi32>)
// CHECK-NOT:   linalg.quantized_matmul
