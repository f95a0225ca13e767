; Hand-written assembly -> program file -> canonical assembly -> the same program file.
; RUN: m100-translate --from-asm %s --to-bin -o %t.m100
; RUN: m100-translate --bin-to-asm %t.m100 | filecheck %s
; RUN: m100-translate --bin-to-asm %t.m100 -o %t.asm
; RUN: m100-translate --from-asm %t.asm --to-bin -o %t2.m100
; RUN: %python -c "import sys; a, b = (open(p, 'rb').read() for p in sys.argv[1:]); sys.exit(a != b)" %t.m100 %t2.m100

.machine tiny                     ; a preset may omit its fingerprint
.meta "note" "lit"
.symbol input "x" f32[4,8] ddr@8192
.segment ddr@0x1000 "w"
.data 00010203
.ccb
ccb.dma engine=0 src=ddr@8192:f32[(0,1,31)] dst=hbsm0@0:f32[(0,1,31)] \
        sync{signal(c1->1,+1,end)}
.cluster 0
dtdu.fill tpb=1 dst=hbsm1@0x0:f16[(0,8,8),(0,1,7)] value=0 sync{blocks=2 wait(c3@t1>=0,+1)}
cvu.pipeline tpb=0 inputs=[hbsm0@0x0:f32[(0,1,31)]] in_shapes=[[4,8]] output=hbsm0@0x80:f32[(0,1,31)] out_shape=[4,8] \
  stages=[rmax(in0){axis=1},   ; inside brackets a newline does not end the instruction
          sub(in0, s0), exp(s1)]

; CHECK:      .machine "tiny" 0x{{[0-9a-f]+}}
; CHECK-NEXT: .meta "note" "lit"
; CHECK-NEXT: .symbol input "x" f32[4,8] ddr@0x2000
; CHECK-NEXT: .segment ddr@0x1000 "w"  ; 4 bytes
; CHECK-NEXT: .data 00010203
; CHECK-NEXT: .ccb
; CHECK-NEXT: ccb.dma engine=0 src=ddr@0x2000:f32[(0,1,31)] dst=hbsm0@0x0:f32[(0,1,31)] sync{signal(c1->0x1,+1,end)}
; CHECK-NEXT: .cluster 0
; CHECK-NEXT: dtdu.fill tpb=1 dst=hbsm1@0x0:f16[(0,8,8),(0,1,7)] value=0.0 sync{blocks=2 wait(c3@t1>=0,+1)}
; CHECK-NEXT: cvu.pipeline tpb=0 inputs=[hbsm0@0x0:f32[(0,1,31)]] in_shapes=[[4,8]] output=hbsm0@0x80:f32[(0,1,31)] out_shape=[4,8] stages=[rmax(in0){axis=1}, sub(in0,s0), exp(s1)]
