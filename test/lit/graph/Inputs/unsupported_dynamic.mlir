func.func @dyn(%x: tensor<?x4xf32>, %w: tensor<4x4xf32>, %z: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %y = linalg.matmul ins(%x, %w : tensor<?x4xf32>, tensor<4x4xf32>) outs(%z : tensor<?x4xf32>) -> tensor<?x4xf32>
  func.return %y : tensor<?x4xf32>
}
