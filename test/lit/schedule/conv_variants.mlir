// RUN: m100-opt %s -p layout-nhwc | filecheck %s --check-prefix=LAYOUT
// RUN: m100-opt %s -p 'm100-graph,m100-schedule{machine=tiny strategy=single}' | filecheck %s
// RUN: m100-opt %S/Inputs/conv_runtime.mlir -p 'm100-graph,m100-schedule{machine=tiny strategy=single}' | filecheck %s --check-prefix=RT
// RUN: not m100-opt %S/Inputs/grouped_conv.mlir -p 'm100-graph,m100-schedule{machine=tiny}' 2>&1 | filecheck %s --check-prefix=GROUPED

// A depthwise conv (torch-mlir's form of ONNX Conv with group = channels) and a conv whose filter
// and bias are runtime inputs (ONNX Conv with W and B as graph inputs).
func.func @dw(%x: tensor<1x4x6x6xf32>) -> tensor<1x4x4x4xf32> {
  %zero = arith.constant 0.0 : f32
  %w = arith.constant dense<[[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], [[0.5, 0.5, 0.5], [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]], [[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]]]> : tensor<4x3x3xf32>
  %e = tensor.empty() : tensor<1x4x4x4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %y = linalg.depthwise_conv_2d_nchw_chw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<1x4x6x6xf32>, tensor<4x3x3xf32>) outs(%f : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  func.return %y : tensor<1x4x4x4xf32>
}

// layout-nhwc: NHWC activations, the [c, kh, kw] filter pre-packed to [kh, kw, c]
// LAYOUT-LABEL: func.func @dw
// LAYOUT:       %[[XT:.*]] = linalg.transpose ins(%x:tensor<1x4x6x6xf32>) {{.*}} permutation = [0, 2, 3, 1]
// LAYOUT:       %[[W:.*]] = arith.constant dense<{{\[\[\[}}1.000000e+00, 1.000000e+00, 5.000000e-01, -1.000000e+00], [2.000000e+00, 0.000000e+00, 5.000000e-01, 0.000000e+00]{{.*}}> : tensor<3x3x4xf32>
// LAYOUT:       linalg.depthwise_conv_2d_nhwc_hwc {{.*}} ins(%[[XT]], %[[W]] : tensor<1x6x6x4xf32>, tensor<3x3x4xf32>)
// LAYOUT-NOT:   linalg.depthwise_conv_2d_nchw_chw

// m100-schedule: one TCU grouped conv, groups = channels, filter [3, 3, 1, 4]
// CHECK-LABEL:  tpb.program "tiny"
// CHECK:        tpb.conv2d tpb 0 x({{.*}}) w({{.*}}) y({{.*}}) {{.*}}{n = 1, h = 6, width = 6, c = 4, f = 4, kh = 3, kw = 3, groups = 4,

// the runtime filter is transposed to HWCF (a DMA), the runtime bias is the TCU epilogue's bias
// RT-LABEL:     tpb.program "tiny"
// RT:           tpb.conv2d tpb 0 x({{.*}}) w({{.*}}) y({{.*}}) bias({{.*}})
// GROUPED: grouped convolution
