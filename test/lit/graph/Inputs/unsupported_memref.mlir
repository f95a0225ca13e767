func.func @alloc(%x: tensor<4xf32>) -> tensor<4xf32> {
  %m = memref.alloc() : memref<4xf32>
  func.return %x : tensor<4xf32>
}
