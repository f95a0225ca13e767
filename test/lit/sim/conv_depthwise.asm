// Depthwise 3x3 conv, stride 2, pad 1, groups = channels, on TPB 1, in 3 blocks of output
// rows; input symbol in HBSM, weights copied in by DMA. Expected values: numpy oracle.
// RUN: %python -c "import numpy as np; np.savez('%t.npz', x=(np.arange(144).reshape(1, 6, 6, 4) % 9 - 4).astype(np.int8))"
// RUN: m100-sim %s --inputs %t.npz --print-outputs | filecheck %s
// CHECK: y = {{\[\[}}{{\[\[}}  6,   3, -12,   5],
// CHECK-NEXT:    [ -7,   6,  -8, -10],
// CHECK-NEXT:    [ -7,   5, -10,  -8]],
// CHECK-EMPTY:
// CHECK-NEXT:   {{\[\[}} -8, -19,   7,  -4],
// CHECK-NEXT:    [  6, -17,  -1,   3],
// CHECK-NEXT:    [ 14,   1,  18,  14]],
// CHECK-EMPTY:
// CHECK-NEXT:   {{\[\[}} -5,  14,  -8,  -7],
// CHECK-NEXT:    [ 18,   1,  14,  15],
// CHECK-NEXT:    [ -1, -17,   6,  -1]]]]
.machine "tiny" 0
.symbol input "x" i8[1,6,6,4] hbsm1@0x0
.symbol output "y" i32[1,3,3,4] hbsm1@0x400
.segment sram@0x0 "w"
.data feff000102feff000102feff000102feff000102feff000102feff000102feff000102fe
.ccb
ccb.dma engine=0 src=sram@0x0:i8[(0,1,35)] dst=hbsm1@0x200:i8[(0,1,35)] sync{signal(c0->0x2,+1,end)}
.cluster 0
tcu.conv2d tpb=1 x=hbsm1@0x0:i8[(0,1,143)] w=hbsm1@0x200:i8[(0,1,35)] y=hbsm1@0x400:i32[(0,1,35)] n=1 h=6 width=6 c=4 f=4 kh=3 kw=3 stride=[2,2] pad=[1,1,1,1] groups=4 sync{blocks=3 wait(c0@t1>=1,+0)}
