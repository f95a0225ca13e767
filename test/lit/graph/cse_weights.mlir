// RUN: m100-opt %s -p cse-weights | filecheck %s

// Two equal weight constants become one; a constant with the same type, length and first / last
// 64 bytes but one different byte in the middle (a hash collision of cse-weights' key) stays, as
// xDSL's cse keeps it; so does an equal constant of another shape.
func.func @weights() -> (tensor<40xf32>, tensor<40xf32>, tensor<40xf32>, tensor<5x8xf32>) {
  %a = arith.constant dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0, 20.0, 21.0, 22.0, 23.0, 24.0, 25.0, 26.0, 27.0, 28.0, 29.0, 30.0, 31.0, 32.0, 33.0, 34.0, 35.0, 36.0, 37.0, 38.0, 39.0, 40.0]> : tensor<40xf32>
  %b = arith.constant dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0, 20.0, 21.0, 22.0, 23.0, 24.0, 25.0, 26.0, 27.0, 28.0, 29.0, 30.0, 31.0, 32.0, 33.0, 34.0, 35.0, 36.0, 37.0, 38.0, 39.0, 40.0]> : tensor<40xf32>
  %c = arith.constant dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0, -20.0, 21.0, 22.0, 23.0, 24.0, 25.0, 26.0, 27.0, 28.0, 29.0, 30.0, 31.0, 32.0, 33.0, 34.0, 35.0, 36.0, 37.0, 38.0, 39.0, 40.0]> : tensor<40xf32>
  %d = arith.constant dense<[[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], [9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0], [17.0, 18.0, 19.0, 20.0, 21.0, 22.0, 23.0, 24.0], [25.0, 26.0, 27.0, 28.0, 29.0, 30.0, 31.0, 32.0], [33.0, 34.0, 35.0, 36.0, 37.0, 38.0, 39.0, 40.0]]> : tensor<5x8xf32>
  func.return %a, %b, %c, %d : tensor<40xf32>, tensor<40xf32>, tensor<40xf32>, tensor<5x8xf32>
}

// CHECK-LABEL: func.func @weights
// CHECK:         %[[A:.*]] = arith.constant dense<[1.000000e+00, 2.000000e+00, {{.*}}, 1.900000e+01, 2.000000e+01, {{.*}}]> : tensor<40xf32>
// CHECK-NEXT:    %[[C:.*]] = arith.constant dense<[{{.*}}1.900000e+01, -2.000000e+01, {{.*}}]> : tensor<40xf32>
// CHECK-NEXT:    %[[D:.*]] = arith.constant dense<{{.*}}> : tensor<5x8xf32>
// CHECK-NEXT:    func.return %[[A]], %[[A]], %[[C]], %[[D]] : tensor<40xf32>, tensor<40xf32>, tensor<40xf32>, tensor<5x8xf32>
