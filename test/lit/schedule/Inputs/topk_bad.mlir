// A sort whose second operand is an input, not the index iota: not the TopK form.
builtin.module {
  func.func @m(%arg0: tensor<3x6xf32> {m100.name = "x"}, %idx: tensor<3x6xi64>) -> (tensor<3x2xf32> {m100.name = "v"}, tensor<3x2xi64> {m100.name = "i"}) {
    %0 = tensor.empty() : tensor<3x6xi64>
    %1 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} outs(%0 : tensor<3x6xi64>) {
    ^bb0(%arg5: i64):
      %2 = linalg.index 1 : index
      %3 = arith.index_cast %2 : index to i64
      linalg.yield %3 : i64
    } -> tensor<3x6xi64>
    %4, %5 = "tm_tensor.sort"(%arg0, %idx) <{dimension = 1 : i64, operandSegmentSizes = array<i32: 0, 2>}> ({
    ^bb0(%arg1: f32, %arg2: f32, %arg3: i64, %arg4: i64):
      %6 = arith.cmpf oge, %arg1, %arg2 : f32
      "tm_tensor.yield"(%6) : (i1) -> ()
    }) : (tensor<3x6xf32>, tensor<3x6xi64>) -> (tensor<3x6xf32>, tensor<3x6xi64>)
    %7 = tensor.extract_slice %4[0, 0] [3, 2] [1, 1] : tensor<3x6xf32> to tensor<3x2xf32>
    %8 = tensor.extract_slice %5[0, 0] [3, 2] [1, 1] : tensor<3x6xi64> to tensor<3x2xi64>
    func.return %7, %8 : tensor<3x2xf32>, tensor<3x2xi64>
  }
}

