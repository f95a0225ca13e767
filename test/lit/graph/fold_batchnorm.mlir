// RUN: m100-opt %s -p fold-batchnorm | filecheck %s

#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#ch = affine_map<(d0, d1, d2, d3) -> (d3)>

// conv -> (x - mean) * scale + beta, all per output channel (BatchNormalization after
// fold-constants): W'[.., f] = W[.., f] * scale[f]; bias = (0 - mean) * scale + beta.
func.func @bn(%x: tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32> {
  %zero = arith.constant 0.0 : f32
  %w = arith.constant dense<[[[[1.0, 2.0], [3.0, 4.0]]]]> : tensor<1x1x2x2xf32>
  %mean = arith.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %scale = arith.constant dense<[2.0, 10.0]> : tensor<2xf32>
  %beta = arith.constant dense<[0.5, -0.5]> : tensor<2xf32>
  %e = tensor.empty() : tensor<1x2x2x2xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %c = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<1x2x2x2xf32>, tensor<1x1x2x2xf32>) outs(%z : tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %s = linalg.generic {indexing_maps = [#id, #ch, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%c, %mean : tensor<1x2x2x2xf32>, tensor<2xf32>) outs(%e : tensor<1x2x2x2xf32>) {
  ^bb0(%in: f32, %k: f32, %out: f32):
    %r = arith.subf %in, %k : f32
    linalg.yield %r : f32
  } -> tensor<1x2x2x2xf32>
  %m = linalg.generic {indexing_maps = [#id, #ch, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s, %scale : tensor<1x2x2x2xf32>, tensor<2xf32>) outs(%e : tensor<1x2x2x2xf32>) {
  ^bb0(%in: f32, %k: f32, %out: f32):
    %r = arith.mulf %in, %k : f32
    linalg.yield %r : f32
  } -> tensor<1x2x2x2xf32>
  %a = linalg.generic {indexing_maps = [#id, #ch, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%m, %beta : tensor<1x2x2x2xf32>, tensor<2xf32>) outs(%e : tensor<1x2x2x2xf32>) {
  ^bb0(%in: f32, %k: f32, %out: f32):
    %r = arith.addf %in, %k : f32
    linalg.yield %r : f32
  } -> tensor<1x2x2x2xf32>
  func.return %a : tensor<1x2x2x2xf32>
}
// CHECK-LABEL: func.func @bn
// CHECK:       %[[W:.*]] = arith.constant dense<{{\[\[\[}}[2.000000e+00, 2.000000e+01], [6.000000e+00, 4.000000e+01]]]]> : tensor<1x1x2x2xf32>
// CHECK:       %[[B:.*]] = arith.constant dense<[-1.500000e+00, -2.050000e+01]> : tensor<2xf32>
// CHECK:       %[[BB:.*]] = linalg.broadcast ins(%[[B]]:tensor<2xf32>) outs(%{{.*}}:tensor<1x2x2x2xf32>) dimensions = [0, 1, 2]
// CHECK:       %[[C:.*]] = linalg.conv_2d_nhwc_hwcf {{.*}} ins(%x, %[[W]] : {{.*}}) outs(%[[BB]] : tensor<1x2x2x2xf32>)
// CHECK-NOT:   linalg.generic
// CHECK:       func.return %[[C]]

// Negative: a per-element (not per-channel) constant and a non-constant operand stay.
func.func @kept(%x: tensor<1x2x2x2xf32>, %y: tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32> {
  %zero = arith.constant 0.0 : f32
  %w = arith.constant dense<[[[[1.0, 2.0], [3.0, 4.0]]]]> : tensor<1x1x2x2xf32>
  %k = arith.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>
  %e = tensor.empty() : tensor<1x2x2x2xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %c = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<1x2x2x2xf32>, tensor<1x1x2x2xf32>) outs(%z : tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %m = linalg.generic {indexing_maps = [#id, affine_map<(d0, d1, d2, d3) -> (d2, d3)>, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%c, %k : tensor<1x2x2x2xf32>, tensor<2x2xf32>) outs(%e : tensor<1x2x2x2xf32>) {
  ^bb0(%in: f32, %kk: f32, %out: f32):
    %r = arith.mulf %in, %kk : f32
    linalg.yield %r : f32
  } -> tensor<1x2x2x2xf32>
  %a = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%m, %y : tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>) outs(%e : tensor<1x2x2x2xf32>) {
  ^bb0(%in: f32, %yy: f32, %out: f32):
    %r = arith.addf %in, %yy : f32
    linalg.yield %r : f32
  } -> tensor<1x2x2x2xf32>
  func.return %a : tensor<1x2x2x2xf32>
}
// CHECK-LABEL: func.func @kept
// CHECK:       linalg.conv_2d_nhwc_hwcf {{.*}} ins(%x, %w
// CHECK:       arith.mulf
// CHECK:       arith.addf
