// The named ops xDSL 0.74 lacks and the multi-result linalg.generic parse, print and re-parse
// (pretty form, and the generic form fed back in).
// RUN: m100-opt %s | filecheck %s
// RUN: m100-opt %s --print-op-generic | m100-opt | filecheck %s

func.func @ops(%a: tensor<2x3x4xf32>, %b: tensor<2x4x5xf32>, %c: tensor<2x3x5xf32>,
               %x: tensor<1x3x9x9xf32>, %dw: tensor<3x3x3xf32>, %o: tensor<1x3x4x4xf32>,
               %xn: tensor<1x9x9x3xf32>, %dwn: tensor<3x3x3xf32>, %on: tensor<1x7x7x3xf32>,
               %x1: tensor<1x2x10xf32>, %w1: tensor<4x2x3xf32>, %o1: tensor<1x4x8xf32>,
               %p: tensor<1x3x4x4xf32>, %x3: tensor<1x4x4x4x2xf32>, %o3: tensor<1x3x3x3x2xf32>)
    -> (tensor<2x3x5xf32>, tensor<1x3x4x4xf32>, tensor<1x7x7x3xf32>, tensor<1x4x8xf32>,
        tensor<1x3x4x4xf32>, tensor<1x3x3x3x2xf32>) {
  %0 = linalg.batch_matmul ins(%a, %b : tensor<2x3x4xf32>, tensor<2x4x5xf32>) outs(%c : tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
  %1 = linalg.depthwise_conv_2d_nchw_chw {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>} ins(%x, %dw : tensor<1x3x9x9xf32>, tensor<3x3x3xf32>) outs(%o : tensor<1x3x4x4xf32>) -> tensor<1x3x4x4xf32>
  %2 = linalg.depthwise_conv_2d_nhwc_hwc {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%xn, %dwn : tensor<1x9x9x3xf32>, tensor<3x3x3xf32>) outs(%on : tensor<1x7x7x3xf32>) -> tensor<1x7x7x3xf32>
  %3 = linalg.conv_1d_ncw_fcw {dilations = dense<1> : tensor<1xi64>, strides = dense<1> : tensor<1xi64>} ins(%x1, %w1 : tensor<1x2x10xf32>, tensor<4x2x3xf32>) outs(%o1 : tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  %k = tensor.empty() : tensor<3x3xf32>
  %4 = linalg.pooling_nchw_sum {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>} ins(%x, %k : tensor<1x3x9x9xf32>, tensor<3x3xf32>) outs(%p : tensor<1x3x4x4xf32>) -> tensor<1x3x4x4xf32>
  %k3 = tensor.empty() : tensor<2x2x2xf32>
  %5 = linalg.pooling_ndhwc_sum {dilations = dense<1> : tensor<3xi64>, strides = dense<1> : tensor<3xi64>} ins(%x3, %k3 : tensor<1x4x4x4x2xf32>, tensor<2x2x2xf32>) outs(%o3 : tensor<1x3x3x3x2xf32>) -> tensor<1x3x3x3x2xf32>
  func.return %0, %1, %2, %3, %4, %5 : tensor<2x3x5xf32>, tensor<1x3x4x4xf32>, tensor<1x7x7x3xf32>, tensor<1x4x8xf32>, tensor<1x3x4x4xf32>, tensor<1x3x3x3x2xf32>
}

// CHECK-LABEL: func.func @ops
// CHECK:      linalg.batch_matmul ins(%{{.*}}, %{{.*}} : tensor<2x3x4xf32>, tensor<2x4x5xf32>) outs(%{{.*}} : tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
// CHECK:      linalg.depthwise_conv_2d_nchw_chw {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>} ins(
// CHECK:      linalg.depthwise_conv_2d_nhwc_hwc {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(
// CHECK:      linalg.conv_1d_ncw_fcw {dilations = dense<1> : tensor<1xi64>, strides = dense<1> : tensor<1xi64>} ins(
// CHECK:      linalg.pooling_nchw_sum {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>} ins(
// CHECK:      linalg.pooling_ndhwc_sum {dilations = dense<1> : tensor<3xi64>, strides = dense<1> : tensor<3xi64>} ins(

func.func @argmax(%x: tensor<4x6xf32>, %m0: tensor<4xf32>, %i0: tensor<4xi64>) -> (tensor<4xf32>, tensor<4xi64>) {
  %r:2 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<4x6xf32>) outs(%m0, %i0 : tensor<4xf32>, tensor<4xi64>) {
  ^bb0(%in: f32, %acc: f32, %idx: i64):
    %j = linalg.index 1 : index
    %ji = arith.index_cast %j : index to i64
    %gt = arith.cmpf ogt, %in, %acc : f32
    %mx = arith.select %gt, %in, %acc : f32
    %ix = arith.select %gt, %ji, %idx : i64
    linalg.yield %mx, %ix : f32, i64
  } -> (tensor<4xf32>, tensor<4xi64>)
  func.return %r#0, %r#1 : tensor<4xf32>, tensor<4xi64>
}

// CHECK-LABEL: func.func @argmax
// CHECK:      %{{.*}}, %{{.*}} = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]} ins(%{{.*}} : tensor<4x6xf32>) outs(%{{.*}}, %{{.*}} : tensor<4xf32>, tensor<4xi64>) {
// CHECK:      } -> (tensor<4xf32>, tensor<4xi64>)

func.func @neg_inf_mask() -> tensor<3xf32> {
  %c = arith.constant dense<[0.0, 0xFF800000, 2.0]> : tensor<3xf32>
  func.return %c : tensor<3xf32>
}
// CHECK-LABEL: func.func @neg_inf_mask
// CHECK:      arith.constant dense<[0.000000e+00, 0xff800000, 2.000000e+00]> : tensor<3xf32>
