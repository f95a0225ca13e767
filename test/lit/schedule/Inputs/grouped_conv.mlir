func.func @g2(%x: tensor<1x2x4x6x6xf32>, %w: tensor<2x3x4x3x3xf32>) -> tensor<1x2x3x4x4xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x2x3x4x4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<1x2x3x4x4xf32>) -> tensor<1x2x3x4x4xf32>
  %y = linalg.conv_2d_ngchw_gfchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<1x2x4x6x6xf32>, tensor<2x3x4x3x3xf32>) outs(%f : tensor<1x2x3x4x4xf32>) -> tensor<1x2x3x4x4xf32>
  func.return %y : tensor<1x2x3x4x4xf32>
}
