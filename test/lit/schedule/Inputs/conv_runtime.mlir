func.func @rt(%x: tensor<1x2x5x5xf32>, %w: tensor<3x2x3x3xf32>, %b: tensor<3xf32>) -> tensor<1x3x3x3xf32> {
  %e = tensor.empty() : tensor<1x3x3x3xf32>
  %bb = linalg.broadcast ins(%b : tensor<3xf32>) outs(%e : tensor<1x3x3x3xf32>) dimensions = [0, 2, 3]
  %y = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<1x2x5x5xf32>, tensor<3x2x3x3xf32>) outs(%bb : tensor<1x3x3x3xf32>) -> tensor<1x3x3x3xf32>
  func.return %y : tensor<1x3x3x3xf32>
}
