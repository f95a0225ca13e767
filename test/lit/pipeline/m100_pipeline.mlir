// RUN: m100-opt %S/../schedule/Inputs/mlp_relu.mlir -p 'm100-pipeline{machine=tiny}' | filecheck %s
// RUN: m100-opt %S/../schedule/Inputs/mlp_relu.mlir -p 'm100-pipeline{machine=tiny certificate="%t.cert.json"}' -o %t.mlir
// RUN: m100-translate %t.mlir --to-bin -o %t.m100
// RUN: m100-sim %t.m100 --check-certificate %t.cert.json | filecheck %s --check-prefix=CERT
// RUN: not m100-opt %S/../schedule/Inputs/mlp_relu.mlir -p 'm100-pipeline{sync-mode=magic}' 2>&1 | filecheck %s --check-prefix=MODE
// RUN: not m100-opt %t.mlir -p m100-pipeline 2>&1 | filecheck %s --check-prefix=TWICE

// The whole lowering in one pass: a resolved program (walks, sync actions) on the tiny machine.
// CHECK:     tpb.program "tiny" resolved
// CHECK:     tpb.symbol "arg0" input 64x32xf32 at ddr 0
// CHECK:     tpb.dma engine {{[01]}} src(%{{[0-9]+}}, #twu.walk<ddr,
// CHECK-SAME: sync #sync.actions<
// CHECK:     tpb.matmul tpb {{[01]}} a(%{{[0-9]+}}, #twu.walk<hbsm[{{[01]}}]
// CHECK-SAME: sync #sync.actions<{{.*}}monitors = [#sync.monitor<tpb = {{[01]}}, counter = {{[0-9]+}}, expected = {{[0-9]+}}
// CHECK-NOT: #twu.access

// CERT: certificate {{.*}}.cert.json: {{[0-9]+}} edges, conflicts derived from the program: verified

// MODE: m100-opt: error: m100-pipeline: unknown sync-mode 'magic' (known: dataflow, barrier-all)

// TWICE: m100-opt: error: m100-pipeline: the module already holds a tpb.program
