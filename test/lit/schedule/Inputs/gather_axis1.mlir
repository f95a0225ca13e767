builtin.module {
  func.func @m(%arg0: tensor<3x5x4xf32> {m100.name = "d"}, %arg1: tensor<2x2xi64> {m100.name = "i"}) -> (tensor<3x2x2x4xf32> {m100.name = "o"}) {
    %0 = arith.constant 5 : i64
    %1 = arith.constant 0 : i64
    %2 = tensor.empty() : tensor<2x2xi1>
    %3 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%arg1 : tensor<2x2xi64>) outs(%2 : tensor<2x2xi1>) {
    ^bb0(%arg10: i64, %arg11: i1):
      %4 = arith.cmpi slt, %arg10, %1 : i64
      linalg.yield %4 : i1
    } -> tensor<2x2xi1>
    %5 = tensor.empty() : tensor<2x2xi64>
    %6 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%arg1 : tensor<2x2xi64>) outs(%5 : tensor<2x2xi64>) {
    ^bb0(%arg8: i64, %arg9: i64):
      %7 = arith.addi %arg8, %0 : i64
      linalg.yield %7 : i64
    } -> tensor<2x2xi64>
    %8 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%3, %6, %arg1 : tensor<2x2xi1>, tensor<2x2xi64>, tensor<2x2xi64>) outs(%5 : tensor<2x2xi64>) {
    ^bb0(%arg4: i1, %arg5: i64, %arg6: i64, %arg7: i64):
      %9 = arith.select %arg4, %arg5, %arg6 : i64
      linalg.yield %9 : i64
    } -> tensor<2x2xi64>
    %10 = tensor.collapse_shape %8 [[0 : i64, 1 : i64]] : tensor<2x2xi64> into tensor<4xi64>
    %11 = tensor.empty() : tensor<3x4x4xf32>
    %12 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d1)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%10 : tensor<4xi64>) outs(%11 : tensor<3x4x4xf32>) {
    ^bb0(%arg2: i64, %arg3: f32):
      %13 = arith.index_cast %arg2 : i64 to index
      %14 = linalg.index 0 : index
      %15 = linalg.index 2 : index
      %16 = tensor.extract %arg0[%14, %13, %15] : tensor<3x5x4xf32>
      linalg.yield %16 : f32
    } -> tensor<3x4x4xf32>
    %17 = tensor.expand_shape %12 [[0 : i64], [1 : i64, 2 : i64], [3 : i64]] output_shape [3, 2, 2, 4] : tensor<3x4x4xf32> into tensor<3x2x2x4xf32>
    func.return %17 : tensor<3x2x2x4xf32>
  }
}

