func.func @isum8(%x: tensor<3x4xi8>) -> tensor<3xi8> {
  %zero = arith.constant 0 : i8
  %e = tensor.empty() : tensor<3xi8>
  %f = linalg.fill ins(%zero : i8) outs(%e : tensor<3xi8>) -> tensor<3xi8>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<3x4xi8>) outs(%f : tensor<3xi8>) {
  ^bb0(%a: i8, %acc: i8):
    %s = arith.addi %a, %acc : i8
    linalg.yield %s : i8
  } -> tensor<3xi8>
  func.return %r : tensor<3xi8>
}
