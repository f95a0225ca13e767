// CSU routines on the cluster CPU: gather rows, top-3 (ties: lower index first), argmax.
// RUN: %python -c "import numpy as np; np.savez('%t.npz', table=(np.arange(20).reshape(5, 4) * 3 % 11).astype(np.float32), idx=np.array([4, 0, 4, 2], np.int32), x=np.array([[3, 9, 1, 9, 4, 0], [5, 5, 5, 2, 8, 1]], np.float32))"
// RUN: m100-sim %s --inputs %t.npz --print-outputs | filecheck %s
// CHECK: rows = {{\[\[}} 4.,  7., 10.,  2.],
// CHECK-NEXT:  [ 0.,  3.,  6.,  9.],
// CHECK-NEXT:  [ 4.,  7., 10.,  2.],
// CHECK-NEXT:  [ 2.,  5.,  8.,  0.]]
// CHECK: topi = {{\[\[}}1, 3, 4],
// CHECK-NEXT:  [4, 0, 1]]
// CHECK: amax = [1, 4]
.machine "tiny" 0
.symbol input "table" f32[5,4] hbsm0@0x0
.symbol input "idx" i32[4] hbsm0@0x100
.symbol input "x" f32[2,6] hbsm0@0x200
.symbol output "rows" f32[4,4] ddr@0x0
.symbol output "topi" i32[2,3] hbsm0@0x400
.symbol output "amax" i32[2] hbsm0@0x500
.cluster 0
csu.call tpb=0 routine=gather operands=[hbsm0@0x0:f32[(0,1,19)], hbsm0@0x100:i32[(0,1,3)], ddr@0x0:f32[(0,1,15)]] params=[5,4,4]
csu.call tpb=0 routine=topk operands=[hbsm0@0x200:f32[(0,1,11)], hbsm0@0x300:f32[(0,1,5)], hbsm0@0x400:i32[(0,1,5)]] params=[2,6,3,1]
csu.call tpb=0 routine=argmax operands=[hbsm0@0x200:f32[(0,1,11)], hbsm0@0x500:i32[(0,1,1)]] params=[2,6]
