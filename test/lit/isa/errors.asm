; Syntax errors: one line naming file:line:col, exit code != 0.
; RUN: not m100-translate --from-asm %s --to-bin -o %t.m100 2>&1 | filecheck %s
; RUN: sed -e 's/sourc=/src=/' %s > %t.fixed.asm
; RUN: not m100-translate --from-asm %t.fixed.asm --to-bin -o %t.m100 2>&1 | filecheck %s --check-prefix=SEM
; RUN: sed -e 's/sourc=/src=/' -e 's/c16->/c15->/' %s > %t.ok.asm
; RUN: m100-translate --from-asm %t.ok.asm --to-bin -o %t.m100

.machine tiny
.ccb
ccb.dma engine=0 sourc=ddr@0x0:i8[(0,1,15)] dst=hbsm0@0x0:i8[(0,1,15)] sync{signal(c16->0x1,+1,end)}

; CHECK: m100-translate: error: {{.*}}errors.asm:10:18: ccb.dma has no field 'sourc' (fields: engine, src, dst, tpb_mask, sync)
; CHECK-NOT: Traceback
; SEM: m100-translate: error: {{.*}}CCB stream, instruction 0 (ccb.dma): sync: counter 16 out of range (the SU has 16 counters)
; SEM-NOT: Traceback
