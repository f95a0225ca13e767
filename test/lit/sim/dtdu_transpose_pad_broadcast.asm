// DTDU: fill a 6x5 tile with -7, copy the transpose of a 3x4 input into its interior (a
// column-major source walk and an offset destination walk), then broadcast it to TPB 1.
// RUN: %python -c "import numpy as np; np.savez('%t.npz', x=(np.arange(12).reshape(3, 4) + 1).astype(np.int8))"
// RUN: m100-sim %s --inputs %t.npz --print-outputs | filecheck %s
// CHECK: y = {{\[\[}}-7, -7, -7, -7, -7],
// CHECK-NEXT:  [-7,  1,  5,  9, -7],
// CHECK-NEXT:  [-7,  2,  6, 10, -7],
// CHECK-NEXT:  [-7,  3,  7, 11, -7],
// CHECK-NEXT:  [-7,  4,  8, 12, -7],
// CHECK-NEXT:  [-7, -7, -7, -7, -7]]
.machine "tiny" 0
.symbol input "x" i8[3,4] hbsm0@0x0
.symbol output "y" i8[6,5] hbsm1@0x200
.cluster 0
dtdu.fill tpb=0 dst=hbsm0@0x100:i8[(0,1,29)] value=-7.0 sync{signal(c0->0x1,+1,end)}
dtdu.copy tpb=0 src=hbsm0@0x0:i8[(0,1,3),(0,4,8)] dst=hbsm0@0x100:i8[(6,5,21),(0,1,2)] sync{wait(c0@t0>=1,+0)}
dtdu.broadcast tpb=0 src=hbsm0@0x100:i8[(0,1,29)] dst=hbsm0@0x200:i8[(0,1,29)] tpb_mask=0x2
