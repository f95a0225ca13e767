// RUN: not m100-opt %s -p sync-insert 2>&1 | filecheck %s --check-prefix=WALK
// RUN: not m100-opt %S/Inputs/streams.mlir -p sync-insert 2>&1 | filecheck %s --check-prefix=STREAM
// RUN: not m100-opt %S/Inputs/two_producers.mlir -p 'sync-insert{counter-budget=1 on-budget=error}' 2>&1 | filecheck %s --check-prefix=BUDGET
// RUN: not m100-opt %S/Inputs/two_producers.mlir -p 'sync-insert{sync-mode=fast}' 2>&1 | filecheck %s --check-prefix=MODE
// RUN: m100-opt %S/Inputs/two_producers.mlir -p 'sync-insert{counter-budget=1 report=true}' -o /dev/null 2>&1 | filecheck %s --check-prefix=MERGE

// An operand still given as an affine access (twu-materialize has not run).
tpb.program "tiny" placed {
  %b = hbsm.alloc offset 0 : !hbsm.buffer<hbsm[0], 32x32xf32>
  %t0 = tpb.fill tpb 0 dst(%b) {value = 1.0}
}

// WALK: m100-opt: error: sync-insert: 'tpb.fill' (tpb 0): operand 'dst' has no walk; the resolved level needs a #twu.walk (run twu-materialize)
// STREAM: m100-opt: error: sync-insert: instructions inside tpb.stream regions have no global order; run sync-insert before streams are formed
// BUDGET: m100-opt: error: sync-insert: TPB 0 needs 2 sync counters but the budget is 1
// MODE: m100-opt: error: sync-insert: unknown sync mode 'fast' (known: dataflow, barrier-all)
// MERGE: decision: merge channel {{.*}} into counter 0 of TPB 0
