builtin.module {
  func.func @m(%arg0: tensor<3x8xf32> {m100.name = "x"}) -> (tensor<1x8xi64> {m100.name = "i"}) {
    %0 = arith.constant 0 : i64
    %1 = arith.constant 0xff800000 : f32
    %2 = tensor.empty() : tensor<8xi64>
    %3 = linalg.fill ins(%0 : i64) outs(%2 : tensor<8xi64>) -> tensor<8xi64>
    %4 = tensor.empty() : tensor<8xf32>
    %5 = linalg.fill ins(%1 : f32) outs(%4 : tensor<8xf32>) -> tensor<8xf32>
    %6, %7 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d1)>], iterator_types = ["reduction", "parallel"]} ins(%arg0 : tensor<3x8xf32>) outs(%5, %3 : tensor<8xf32>, tensor<8xi64>) {
    ^bb0(%arg1: f32, %arg2: f32, %arg3: i64):
      %8 = linalg.index 0 : index
      %9 = arith.index_cast %8 : index to i64
      %10 = arith.maximumf %arg1, %arg2 : f32
      %11 = arith.cmpf ogt, %arg1, %arg2 : f32
      %12 = arith.select %11, %9, %arg3 : i64
      linalg.yield %10, %12 : f32, i64
    } -> (tensor<8xf32>, tensor<8xi64>)
    %13 = tensor.expand_shape %7 [[0 : i64, 1 : i64]] output_shape [1, 8] : tensor<8xi64> into tensor<1x8xi64>
    func.return %13 : tensor<1x8xi64>
  }
}

