func.func @ired(%x: tensor<3x5x4xi8>, %u: tensor<3x5x4xi8>) -> (tensor<3x5xi8>, tensor<5x4xi8>) {
  %zero64 = arith.constant 0 : i64
  %smin = arith.constant -128 : i8
  %uones = arith.constant -1 : i8
  %ei = tensor.empty() : tensor<3x5xi64>
  %fi = linalg.fill ins(%zero64 : i64) outs(%ei : tensor<3x5xi64>) -> tensor<3x5xi64>
  %e = tensor.empty() : tensor<3x5xi8>
  %f = linalg.fill ins(%smin : i8) outs(%e : tensor<3x5xi8>) -> tensor<3x5xi8>
  // torch-mlir's ReduceMax of int8 along the last axis: max with index, the index unused
  %m, %mi = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x : tensor<3x5x4xi8>) outs(%f, %fi : tensor<3x5xi8>, tensor<3x5xi64>) {
  ^bb0(%a: i8, %acc: i8, %idx: i64):
    %i = linalg.index 2 : index
    %ic = arith.index_cast %i : index to i64
    %mx = arith.maxsi %a, %acc : i8
    %gt = arith.cmpi sgt, %a, %acc : i8
    %s = arith.select %gt, %ic, %idx : i64
    linalg.yield %mx, %s : i8, i64
  } -> (tensor<3x5xi8>, tensor<3x5xi64>)
  // ReduceMin of uint8 along axis 0: minui from an all-ones init
  %ei2 = tensor.empty() : tensor<5x4xi64>
  %fi2 = linalg.fill ins(%zero64 : i64) outs(%ei2 : tensor<5x4xi64>) -> tensor<5x4xi64>
  %e2 = tensor.empty() : tensor<5x4xi8>
  %f2 = linalg.fill ins(%uones : i8) outs(%e2 : tensor<5x4xi8>) -> tensor<5x4xi8>
  %n, %ni = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>], iterator_types = ["reduction", "parallel", "parallel"]} ins(%u : tensor<3x5x4xi8>) outs(%f2, %fi2 : tensor<5x4xi8>, tensor<5x4xi64>) {
  ^bb0(%a: i8, %acc: i8, %idx: i64):
    %i = linalg.index 0 : index
    %ic = arith.index_cast %i : index to i64
    %mn = arith.minui %a, %acc : i8
    %lt = arith.cmpi ult, %a, %acc : i8
    %s = arith.select %lt, %ic, %idx : i64
    linalg.yield %mn, %s : i8, i64
  } -> (tensor<5x4xi8>, tensor<5x4xi64>)
  func.return %m, %n : tensor<3x5xi8>, tensor<5x4xi8>
}
