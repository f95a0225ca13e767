// CVU: softmax along rows scaled by 100, written as i8 (round half to even, saturate).
// Expected values: numpy oracle (float64).
// RUN: %python -c "import numpy as np; np.savez('%t.npz', x=(((np.arange(24).reshape(3, 8) % 7) - 3) * 0.5).astype(np.float32))"
// RUN: m100-sim %s --inputs %t.npz --print-outputs --functional-only | filecheck %s
// CHECK: y = {{\[\[}} 2,  3,  5,  9, 15, 24, 40,  2],
// CHECK-NEXT:  [ 3,  5,  9, 14, 24, 39,  2,  3],
// CHECK-NEXT:  [ 5,  9, 14, 23, 38,  2,  3,  5]]
.machine "tiny" 0
.symbol input "x" f32[3,8] hbsm0@0x0
.symbol output "y" i8[3,8] hbsm0@0x100
.cluster 0
cvu.pipeline tpb=0 inputs=[hbsm0@0x0:f32[(0,1,23)]] in_shapes=[[3,8]] output=hbsm0@0x100:i8[(0,1,23)] out_shape=[3,8] stages=[softmax(in0){axis=1}, mul(s0,#100.0)] sync{blocks=3}
