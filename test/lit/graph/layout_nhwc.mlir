// RUN: m100-opt %s -p layout-nhwc | filecheck %s
// RUN: m100-opt %s -p layout-nhwc,simplify-algebra | filecheck %s --check-prefix=SIMP
// RUN: m100-opt %s -p 'layout-nhwc{propagate=false}',simplify-algebra | filecheck %s --check-prefix=NOPROP
// RUN: m100-opt %s -p layout-nhwc,simplify-algebra | filecheck %s --check-prefix=POOL
// RUN: m100-opt %s -p 'layout-nhwc{pools=false}',simplify-algebra | filecheck %s --check-prefix=NOPOOL

// Two 1x1 convolutions (torch-mlir form: bias broadcast as the init) with a ReLU between them.
func.func @two_convs(%x: tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32> {
  %zero = arith.constant 0.0 : f32
  %w = arith.constant dense<[[[[1.0]], [[2.0]]], [[[3.0]], [[4.0]]]]> : tensor<2x2x1x1xf32>
  %b = arith.constant dense<[0.5, -0.5]> : tensor<2xf32>
  %e = tensor.empty() : tensor<1x2x4x4xf32>
  %bb = linalg.broadcast ins(%b : tensor<2xf32>) outs(%e : tensor<1x2x4x4xf32>) dimensions = [0, 2, 3]
  %c1 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>) outs(%bb : tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%c1 : tensor<1x2x4x4xf32>) outs(%e : tensor<1x2x4x4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.maximumf %in, %zero : f32
    linalg.yield %m : f32
  } -> tensor<1x2x4x4xf32>
  %c2 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%r, %w : tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>) outs(%bb : tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  func.return %c2 : tensor<1x2x4x4xf32>
}

// CHECK-LABEL: func.func @two_convs
// CHECK:       %[[XT:.*]] = linalg.transpose ins(%x:tensor<1x2x4x4xf32>) outs(%{{.*}}:tensor<1x4x4x2xf32>) permutation = [0, 2, 3, 1]
// pre-packed HWCF weights: w'[0, 0, c, f] = w[f, c, 0, 0]
// CHECK:       %[[W:.*]] = arith.constant dense<{{\[\[\[}}[1.000000e+00, 3.000000e+00], [2.000000e+00, 4.000000e+00]]]]> : tensor<1x1x2x2xf32>
// CHECK:       %[[C1:.*]] = linalg.conv_2d_nhwc_hwcf {strides = dense<1> : vector<2xi64>, dilations = dense<1> : vector<2xi64>} ins(%[[XT]], %[[W]] : tensor<1x4x4x2xf32>, tensor<1x1x2x2xf32>)
// the ReLU now iterates in NHWC and reads the conv result directly
// CHECK:       %[[R:.*]] = linalg.generic {{.*}} ins(%[[C1]] : tensor<1x4x4x2xf32>) outs(%{{.*}} : tensor<1x4x4x2xf32>)
// CHECK:       %[[RB:.*]] = linalg.transpose ins(%[[R]]:tensor<1x4x4x2xf32>) outs(%{{.*}}:tensor<1x2x4x4xf32>) permutation = [0, 3, 1, 2]
// CHECK:       %[[RT:.*]] = linalg.transpose ins(%[[RB]]:tensor<1x2x4x4xf32>) outs(%{{.*}}:tensor<1x4x4x2xf32>) permutation = [0, 2, 3, 1]
// CHECK:       %[[C2:.*]] = linalg.conv_2d_nhwc_hwcf {{.*}} ins(%[[RT]], %{{.*}} : tensor<1x4x4x2xf32>, tensor<1x1x2x2xf32>)
// CHECK:       %[[Y:.*]] = linalg.transpose ins(%[[C2]]:tensor<1x4x4x2xf32>) outs(%{{.*}}:tensor<1x2x4x4xf32>) permutation = [0, 3, 1, 2]
// CHECK:       func.return %[[Y]]
// CHECK-NOT:   linalg.conv_2d_nchw_fchw

// After simplify-algebra only the boundary transposes remain; the bias broadcast is re-targeted
// to NHWC (kept dim 3).
// SIMP-LABEL:  func.func @two_convs
// SIMP:        linalg.transpose ins(%x:tensor<1x2x4x4xf32>)
// SIMP:        linalg.broadcast ins(%b:tensor<2xf32>) outs(%{{.*}}:tensor<1x4x4x2xf32>) dimensions = [0, 1, 2]
// SIMP-NOT:    linalg.transpose
// SIMP:        linalg.conv_2d_nhwc_hwcf
// SIMP-NOT:    linalg.transpose
// SIMP:        linalg.generic
// SIMP-NOT:    linalg.transpose
// SIMP:        %[[C2:.*]] = linalg.conv_2d_nhwc_hwcf
// SIMP-NEXT:   %{{.*}} = tensor.empty() : tensor<1x2x4x4xf32>
// SIMP-NEXT:   %[[Y:.*]] = linalg.transpose ins(%[[C2]]:tensor<1x4x4x2xf32>)
// SIMP-NEXT:   func.return %[[Y]]

// Without propagation the ReLU stays NCHW between two transposes.
// NOPROP:      linalg.transpose
// NOPROP:      linalg.conv_2d_nhwc_hwcf
// NOPROP:      linalg.transpose {{.*}} permutation = [0, 3, 1, 2]
// NOPROP:      linalg.generic {{.*}} ins(%{{.*}} : tensor<1x2x4x4xf32>)
// NOPROP:      linalg.transpose {{.*}} permutation = [0, 2, 3, 1]
// NOPROP:      linalg.conv_2d_nhwc_hwcf

// Weights that are not constant get a transpose (HWCF at run time) instead of pre-packing.
// Negative: an elementwise generic that is not fed by a back-transpose is not re-indexed, and a
// grouped/depthwise convolution is left NCHW.
func.func @runtime_weights(%x: tensor<1x2x4x4xf32>, %w: tensor<3x2x1x1xf32>, %y: tensor<1x3x4x4xf32>, %dw: tensor<3x1x1xf32>) -> (tensor<1x3x4x4xf32>, tensor<1x3x4x4xf32>, tensor<1x3x4x4xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x3x4x4xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<1x3x4x4xf32>) -> tensor<1x3x4x4xf32>
  %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<1x2x4x4xf32>, tensor<3x2x1x1xf32>) outs(%z : tensor<1x3x4x4xf32>) -> tensor<1x3x4x4xf32>
  %n = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%y : tensor<1x3x4x4xf32>) outs(%e : tensor<1x3x4x4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.maximumf %in, %zero : f32
    linalg.yield %m : f32
  } -> tensor<1x3x4x4xf32>
  %d = linalg.depthwise_conv_2d_nchw_chw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%y, %dw : tensor<1x3x4x4xf32>, tensor<3x1x1xf32>) outs(%z : tensor<1x3x4x4xf32>) -> tensor<1x3x4x4xf32>
  func.return %c, %n, %d : tensor<1x3x4x4xf32>, tensor<1x3x4x4xf32>, tensor<1x3x4x4xf32>
}
// CHECK-LABEL: func.func @runtime_weights
// CHECK:       linalg.transpose ins(%w:tensor<3x2x1x1xf32>) outs(%{{.*}}:tensor<1x1x2x3xf32>) permutation = [2, 3, 1, 0]
// CHECK:       linalg.conv_2d_nhwc_hwcf
// CHECK:       linalg.generic {{.*}} ins(%y : tensor<1x3x4x4xf32>) outs(%e : tensor<1x3x4x4xf32>)
// the depthwise conv runs NHWC too; its runtime [c, kh, kw] filter is transposed to [kh, kw, c]
// CHECK:       linalg.transpose ins(%dw:tensor<3x1x1xf32>) outs(%{{.*}}:tensor<1x1x3xf32>) permutation = [1, 2, 0]
// CHECK:       linalg.depthwise_conv_2d_nhwc_hwc {{.*}} : tensor<1x4x4x3xf32>, tensor<1x1x3xf32>)
// CHECK-NOT:   linalg.depthwise_conv_2d_nchw_chw

// Max pooling (with torch-mlir's -inf padding) between a ReLU and the output runs NHWC too.
func.func @pool(%x: tensor<1x2x4x4xf32>) -> tensor<1x2x2x2xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %w = arith.constant dense<1.0> : tensor<2x2x1x1xf32>
  %e = tensor.empty() : tensor<1x2x4x4xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %c = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>) outs(%z : tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = tensor.pad %c low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%a: index, %b: index, %cc: index, %d: index):
    tensor.yield %ninf : f32
  } : tensor<1x2x4x4xf32> to tensor<1x2x6x6xf32>
  %eo = tensor.empty() : tensor<1x2x2x2xf32>
  %fo = linalg.fill ins(%ninf : f32) outs(%eo : tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %win = tensor.empty() : tensor<3x3xf32>
  %mp = linalg.pooling_nchw_max {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>} ins(%p, %win : tensor<1x2x6x6xf32>, tensor<3x3xf32>) outs(%fo : tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  func.return %mp : tensor<1x2x2x2xf32>
}
// POOL-LABEL:  func.func @pool
// POOL:        linalg.conv_2d_nhwc_hwcf
// POOL-NOT:    linalg.transpose
// POOL:        tensor.pad %{{.*}} low[0, 1, 1, 0] high[0, 1, 1, 0]
// POOL-NOT:    linalg.transpose
// POOL:        %[[MP:.*]] = linalg.pooling_nhwc_max {strides = dense<2> : vector<2xi64>, dilations = dense<1> : vector<2xi64>} ins(%{{.*}}, %win : tensor<1x6x6x2xf32>, tensor<3x3xf32>) outs(%{{.*}} : tensor<1x2x2x2xf32>)
// POOL:        linalg.transpose ins(%[[MP]]:tensor<1x2x2x2xf32>) {{.*}} permutation = [0, 3, 1, 2]
// NOPOOL-LABEL: func.func @pool
// NOPOOL:       linalg.transpose {{.*}} permutation = [0, 3, 1, 2]
// NOPOOL:       linalg.pooling_nchw_max
