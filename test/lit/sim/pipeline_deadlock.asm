// The ring-buffer pipeline with the DTDU's back-pressure expectation raised from i-1 to i+1:
// the first copy waits for a slot the CVU frees only after that copy. Deadlock: the wait-for
// cycle is printed; exit code 3.
// RUN: %python -c "import numpy as np; np.savez('%t.npz', a=(np.arange(3072).reshape(6, 16, 32) * 13 % 255 - 127).astype(np.int8), w=(np.arange(512).reshape(32, 16) * 7 % 31 - 15).astype(np.int8))"
// RUN: not m100-sim %s --inputs %t.npz 2>&1 | filecheck %s
// CHECK: m100-sim: deadlock: deadlock at cycle {{[0-9]+}}: no unit can make progress
// CHECK-NEXT: wait-for cycle:
// CHECK-NEXT: TPB0.DTDU #1 dtdu.copy (block 0) waits for counter c1 of TPB 0 >= 1 (it is 0); it would be updated by TPB1.CVU #2 cvu.pipeline
// CHECK-NEXT: TPB1.CVU #2 cvu.pipeline (block 0) waits for counter c0 of TPB 1 >= 1 (it is 0); it would be updated by TPB0.DTDU #1 dtdu.copy
.machine "tiny" 0
.symbol input "a" i8[6,16,32] hbsm0@0x0
.symbol input "w" i8[32,16] hbsm0@0x1000
.symbol output "out" f32[6,16,16] hbsm1@0x6000
.cluster 0
tcu.matmul tpb=0 a=hbsm0@0x0:i8[(0,32,480),(0,1,31)] b=hbsm0@0x1000:i8[(0,16,496),(0,1,15)] c=hbsm0@0x2000:i32[(0,16,240),(0,1,15)] m=16 n=16 k=32 sync{signal(c2->0x1,+1,end)}
dtdu.copy tpb=0 src=hbsm0@0x2000:i32[(0,16,240),(0,1,15)] dst=hbsm1@0x4000:i32[(0,16,240),(0,1,15)] sync{blocks=2 wait(c2@t0>=1,+0) wait(c1@t0>=1,+0) signal(c0->0x2,+1,end) signal(c3->0x1,+1,end)}
cvu.pipeline tpb=1 inputs=[hbsm1@0x4000:i32[(0,16,240),(0,1,15)]] in_shapes=[[16,16]] output=hbsm1@0x6000:f32[(0,16,240),(0,1,15)] out_shape=[16,16] stages=[relu(in0)] sync{wait(c0@t1>=1,+0) signal(c1->0x1,+1,end)}
tcu.matmul tpb=0 a=hbsm0@0x200:i8[(0,32,480),(0,1,31)] b=hbsm0@0x1000:i8[(0,16,496),(0,1,15)] c=hbsm0@0x2400:i32[(0,16,240),(0,1,15)] m=16 n=16 k=32 sync{signal(c2->0x1,+1,end)}
dtdu.copy tpb=0 src=hbsm0@0x2400:i32[(0,16,240),(0,1,15)] dst=hbsm1@0x4400:i32[(0,16,240),(0,1,15)] sync{blocks=2 wait(c2@t0>=2,+0) wait(c1@t0>=2,+0) signal(c0->0x2,+1,end) signal(c3->0x1,+1,end)}
cvu.pipeline tpb=1 inputs=[hbsm1@0x4400:i32[(0,16,240),(0,1,15)]] in_shapes=[[16,16]] output=hbsm1@0x6400:f32[(0,16,240),(0,1,15)] out_shape=[16,16] stages=[relu(in0)] sync{wait(c0@t1>=2,+0) signal(c1->0x1,+1,end)}
tcu.matmul tpb=0 a=hbsm0@0x400:i8[(0,32,480),(0,1,31)] b=hbsm0@0x1000:i8[(0,16,496),(0,1,15)] c=hbsm0@0x2000:i32[(0,16,240),(0,1,15)] m=16 n=16 k=32 sync{wait(c3@t0>=1,+0) signal(c2->0x1,+1,end)}
dtdu.copy tpb=0 src=hbsm0@0x2000:i32[(0,16,240),(0,1,15)] dst=hbsm1@0x4000:i32[(0,16,240),(0,1,15)] sync{blocks=2 wait(c2@t0>=3,+0) wait(c1@t0>=3,+0) signal(c0->0x2,+1,end) signal(c3->0x1,+1,end)}
cvu.pipeline tpb=1 inputs=[hbsm1@0x4000:i32[(0,16,240),(0,1,15)]] in_shapes=[[16,16]] output=hbsm1@0x6800:f32[(0,16,240),(0,1,15)] out_shape=[16,16] stages=[relu(in0)] sync{wait(c0@t1>=3,+0) signal(c1->0x1,+1,end)}
tcu.matmul tpb=0 a=hbsm0@0x600:i8[(0,32,480),(0,1,31)] b=hbsm0@0x1000:i8[(0,16,496),(0,1,15)] c=hbsm0@0x2400:i32[(0,16,240),(0,1,15)] m=16 n=16 k=32 sync{wait(c3@t0>=2,+0) signal(c2->0x1,+1,end)}
dtdu.copy tpb=0 src=hbsm0@0x2400:i32[(0,16,240),(0,1,15)] dst=hbsm1@0x4400:i32[(0,16,240),(0,1,15)] sync{blocks=2 wait(c2@t0>=4,+0) wait(c1@t0>=4,+0) signal(c0->0x2,+1,end) signal(c3->0x1,+1,end)}
cvu.pipeline tpb=1 inputs=[hbsm1@0x4400:i32[(0,16,240),(0,1,15)]] in_shapes=[[16,16]] output=hbsm1@0x6c00:f32[(0,16,240),(0,1,15)] out_shape=[16,16] stages=[relu(in0)] sync{wait(c0@t1>=4,+0) signal(c1->0x1,+1,end)}
tcu.matmul tpb=0 a=hbsm0@0x800:i8[(0,32,480),(0,1,31)] b=hbsm0@0x1000:i8[(0,16,496),(0,1,15)] c=hbsm0@0x2000:i32[(0,16,240),(0,1,15)] m=16 n=16 k=32 sync{wait(c3@t0>=3,+0) signal(c2->0x1,+1,end)}
dtdu.copy tpb=0 src=hbsm0@0x2000:i32[(0,16,240),(0,1,15)] dst=hbsm1@0x4000:i32[(0,16,240),(0,1,15)] sync{blocks=2 wait(c2@t0>=5,+0) wait(c1@t0>=5,+0) signal(c0->0x2,+1,end) signal(c3->0x1,+1,end)}
cvu.pipeline tpb=1 inputs=[hbsm1@0x4000:i32[(0,16,240),(0,1,15)]] in_shapes=[[16,16]] output=hbsm1@0x7000:f32[(0,16,240),(0,1,15)] out_shape=[16,16] stages=[relu(in0)] sync{wait(c0@t1>=5,+0) signal(c1->0x1,+1,end)}
tcu.matmul tpb=0 a=hbsm0@0xa00:i8[(0,32,480),(0,1,31)] b=hbsm0@0x1000:i8[(0,16,496),(0,1,15)] c=hbsm0@0x2400:i32[(0,16,240),(0,1,15)] m=16 n=16 k=32 sync{wait(c3@t0>=4,+0) signal(c2->0x1,+1,end)}
dtdu.copy tpb=0 src=hbsm0@0x2400:i32[(0,16,240),(0,1,15)] dst=hbsm1@0x4400:i32[(0,16,240),(0,1,15)] sync{blocks=2 wait(c2@t0>=6,+0) wait(c1@t0>=6,+0) signal(c0->0x2,+1,end) signal(c3->0x1,+1,end)}
cvu.pipeline tpb=1 inputs=[hbsm1@0x4400:i32[(0,16,240),(0,1,15)]] in_shapes=[[16,16]] output=hbsm1@0x7400:f32[(0,16,240),(0,1,15)] out_shape=[16,16] stages=[relu(in0)] sync{wait(c0@t1>=6,+0) signal(c1->0x1,+1,end)}
