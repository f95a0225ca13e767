// A matmul with a bias and a relu, then a second matmul: the linalg form torch-mlir produces.
func.func @mlp(%x: tensor<64x32xf32>) -> tensor<64x16xf32> {
  %zero = arith.constant 0.0 : f32
  %w1 = arith.constant dense<0.5> : tensor<32x64xf32>
  %b1 = arith.constant dense<0.25> : tensor<64xf32>
  %w2 = arith.constant dense<-0.125> : tensor<64x16xf32>
  %e1 = tensor.empty() : tensor<64x64xf32>
  %bb = linalg.broadcast ins(%b1 : tensor<64xf32>) outs(%e1 : tensor<64x64xf32>) dimensions = [0]
  %y = linalg.matmul ins(%x, %w1 : tensor<64x32xf32>, tensor<32x64xf32>) outs(%bb : tensor<64x64xf32>) -> tensor<64x64xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%y : tensor<64x64xf32>) outs(%e1 : tensor<64x64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %c = arith.cmpf ugt, %a, %zero : f32
    %s = arith.select %c, %a, %zero : f32
    linalg.yield %s : f32
  } -> tensor<64x64xf32>
  %e2 = tensor.empty() : tensor<64x16xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e2 : tensor<64x16xf32>) -> tensor<64x16xf32>
  %z = linalg.matmul ins(%r, %w2 : tensor<64x64xf32>, tensor<64x16xf32>) outs(%f : tensor<64x16xf32>) -> tensor<64x16xf32>
  func.return %z : tensor<64x16xf32>
}
