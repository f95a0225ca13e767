func.func @red(%x: tensor<6x4x8xf32>) -> tensor<4x1xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<4x1xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x1xf32>) -> tensor<4x1xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d1, 0)>], iterator_types = ["reduction", "parallel", "reduction"]} ins(%x : tensor<6x4x8xf32>) outs(%f : tensor<4x1xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %sq = arith.mulf %a, %a : f32
    %s = arith.addf %sq, %acc : f32
    linalg.yield %s : f32
  } -> tensor<4x1xf32>
  func.return %r : tensor<4x1xf32>
}
