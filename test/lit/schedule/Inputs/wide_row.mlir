// A relu over rows of 100000 f32 (400 KB): a row can not be cut into the tiny machine's 64 KiB HBSM.
func.func @wide(%x: tensor<2x100000xf32>) -> tensor<2x100000xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x100000xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<2x100000xf32>) outs(%e : tensor<2x100000xf32>) {
  ^bb0(%a: f32, %o: f32):
    %c = arith.cmpf ugt, %a, %zero : f32
    %s = arith.select %c, %a, %zero : f32
    linalg.yield %s : f32
  } -> tensor<2x100000xf32>
  func.return %r : tensor<2x100000xf32>
}
