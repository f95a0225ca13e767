// A W8A8 matmul: DMA in (input from .npz + weights/bias from segments), TCU matmul with
// bias + relu + requant (x*11 >> 5 rounded, zp -3), DMA out. Expected values: numpy oracle.
// RUN: %python -c "import numpy as np; np.savez('%t.npz', x=(np.arange(32).reshape(4, 8) * 7 % 23 - 11).astype(np.int8))"
// RUN: m100-sim %s --inputs %t.npz --outputs %t.out.npz --stats %t.stats.json --trace %t.trace.json --print-outputs | filecheck %s
// RUN: %python -c "import json; s = json.load(open('%t.stats.json')); print(s['units']['TPB0.TCU']['instructions'], s['instructions'])" | filecheck --check-prefix=STATS %s
// RUN: %python -c "import json; t = json.load(open('%t.trace.json')); ph = set(e['ph'] for e in t['traceEvents']); print(sorted(ph))" | filecheck --check-prefix=TRACE %s
// CHECK: m100-sim: 5/5 instructions
// CHECK: y = {{\[\[}}56, 21, -3,  9],
// CHECK-NEXT:  [71, -3, -3, -1],
// CHECK-NEXT:  [ 7,  6, -3, 60],
// CHECK-NEXT:  [70, -3, 30, -3]]
// STATS: 1 5
// TRACE: ['C', 'M', 'X', 'f', 's']
.machine "tiny" 0
.symbol input "x" i8[4,8] ddr@0x1000
.symbol output "y" i8[4,4] ddr@0x3000
.segment ddr@0x2000 "w"
.data f8fd0207fb0005f9fe0308fc0106faff04f8fd0207fb0005f9fe0308fc0106fa
.segment ddr@0x2100 "bias"
.data 64000000ceffffff0700000000000000
.ccb
ccb.dma engine=0 src=ddr@0x1000:i8[(0,1,31)] dst=hbsm0@0x0:i8[(0,1,31)] sync{signal(c0->0x1,+1,end)}
ccb.dma engine=0 src=ddr@0x2000:i8[(0,1,31)] dst=hbsm0@0x40:i8[(0,1,31)] sync{signal(c0->0x1,+1,end)}
ccb.dma engine=1 src=ddr@0x2100:i32[(0,1,3)] dst=hbsm0@0x100:i32[(0,1,3)] sync{signal(c0->0x1,+1,end)}
ccb.dma engine=0 src=hbsm0@0x200:i8[(0,1,15)] dst=ddr@0x3000:i8[(0,1,15)] sync{wait(c1@t0>=1,+0)}
.cluster 0
tcu.matmul tpb=0 a=hbsm0@0x0:i8[(0,8,24),(0,1,7)] b=hbsm0@0x40:i8[(0,4,28),(0,1,3)] c=hbsm0@0x200:i8[(0,4,12),(0,1,3)] m=4 n=4 k=8 epilogue={bias=hbsm0@0x100:i32[(0,1,3)] act=relu requant={multiplier=11 shift=5 zero_point=-3}} sync{wait(c0@t0>=3,+0) signal(c1->0x1,+1,end)}
