// RUN: m100-opt %S/Inputs/mlp_relu.mlir -p 'm100-graph,m100-schedule{machine=tiny}' | filecheck %s
// RUN: m100-opt %S/Inputs/mlp_relu.mlir -p 'm100-graph,m100-schedule{machine=tiny strategy=single}' | filecheck %s --check-prefix=SINGLE
// RUN: m100-opt %S/Inputs/mlp_relu.mlir -p 'm100-graph,m100-schedule{machine=tiny report=true}' -o /dev/null 2>&1 | filecheck %s --check-prefix=REPORT
// RUN: m100-opt %S/Inputs/mlp_relu.mlir -p 'm100-graph,m100-schedule{machine=tiny},hbsm-allocate,twu-materialize,sync-insert' | filecheck %s --check-prefix=BACKEND
// RUN: not m100-opt %S/Inputs/mlp_relu.mlir -p 'm100-graph,m100-schedule{strategy=magic}' 2>&1 | filecheck %s --check-prefix=STRAT
// RUN: not m100-opt %S/Inputs/wide_row.mlir -p 'm100-graph,m100-schedule{machine=tiny}' 2>&1 | filecheck %s --check-prefix=FIT
// RUN: not m100-opt %S/Inputs/mlp_relu.mlir -p 'm100-graph,m100-schedule{machine=tiny tpbs=9}' 2>&1 | filecheck %s --check-prefix=TPBS

// The function becomes a placed program: symbols at DDR addresses, weights as data segments,
// per-mini-tensor HBSM buffers without offsets, DMAs with affine accesses, TCU ops with the fused
// bias + relu epilogue, token edges and predicted cycles.
// CHECK:      tpb.program "tiny" placed attributes {metadata = ["scheduler", "m100-schedule", "strategy", "auto", "predicted_cycles", "{{[0-9]+}}"]}
// CHECK-DAG:  tpb.symbol "arg0" input 64x32xf32 at ddr 0
// CHECK-DAG:  tpb.symbol "result0" output 64x16xf32 at ddr {{[0-9]+}}
// CHECK-DAG:  tpb.segment "{{c[0-9]+}}" ddr {{[0-9]+}} data "0000003f
// Row bands of 16 or 32 rows (below one 32-row tile the TCU costs whole 8-row granules).
// CHECK:      %[[A:[0-9]+]] = hbsm.alloc : !hbsm.buffer<hbsm[0], {{16|32}}x1x32xf32>
// The weights both TPBs need travel once over the DRB into buffers at one (yet unknown) offset.
// CHECK:      %[[W0:[0-9]+]] = hbsm.alloc {m100.bcast = [[G:[0-9]+]] : i64} : !hbsm.buffer<hbsm[0], 32x64xf32>
// CHECK-NEXT: %[[W1:[0-9]+]] = hbsm.alloc {m100.bcast = [[G]] : i64} : !hbsm.buffer<hbsm[1], 32x64xf32>
// CHECK-DAG:  tpb.dma engine {{[01]}} src(%{{[0-9]+}}, #twu.access<affine_map<(d0, d1) -> (d0, d1)>, [32, 64]>) dst(%[[W0]]) {tpb_mask = 3, pred_start = {{[0-9]+}}, pred_end = {{[0-9]+}}}
// CHECK-DAG:  %[[T:[0-9]+]] = tpb.dma engine {{[01]}} src(%0, #twu.access<affine_map<(d0, d1, d2) -> (d0, d2)>, [{{16|32}}, 1, 32]>) dst(%[[A]])
// CHECK:      tpb.matmul tpb 0 a(%[[A]]) b(%[[W0]]) c(%{{[0-9]+}}) bias(%{{[0-9]+}}) after(%[[T]], {{.*}}) {m = {{16|32}}, n = 64, k = 32, act = "relu", pred_start
// CHECK:      tpb.matmul tpb 1 a(%{{[0-9]+}}) b(%[[W1]])
// The second row band of the result is stored from TPB 1.
// CHECK:      tpb.dma engine {{[01]}} src(%{{[0-9]+}}) dst(%1, #twu.access<affine_map<(d0, d1, d2) -> ((d0 + {{16|32}}), d2)>, [{{16|32}}, 1, 16]>)

// SINGLE-NOT: tpb 1
// SINGLE:     tpb.matmul tpb 0 {{.*}} {m = {{16|32|64}}, n = 64, k = 32, act = "relu"
// The second matmul may run whole-K or in K chunks (the search tries both, StageCfg.chunked).
// SINGLE:     tpb.matmul tpb 0 {{.*}} {m = {{16|32|64}}, n = 16, k = {{32|64}}

// REPORT:      m100-schedule report (@mlp)
// REPORT-NEXT: schedule (auto) on 'tiny': 2 TPBs available, predicted {{[0-9]+}} cycles
// REPORT-NEXT: seg kind          op             unit            TPBs  split bands tile              HBSM B      start        end
// REPORT:      {{matmul[0-9]+}} tcu.matmul
// REPORT:      TCU utilization: {{[0-9.]+}}% of the 2 TPBs that compute (196608 MACs)
// REPORT-NEXT: data movement: DMA0 {{[0-9.]+}} MB, DMA1 {{[0-9.]+}} MB; {{[0-9]+}} DRB broadcasts
// REPORT-NEXT: critical path: {{.*}}compute

// After the backend passes every operand has a walk and every op its sync actions.
// BACKEND:     hbsm.alloc offset {{[0-9]+}} : !hbsm.buffer<hbsm[0], {{16|32}}x1x32xf32>
// BACKEND:     tpb.matmul tpb 0 a(%{{[0-9]+}}, #twu.walk<hbsm[0], {{[0-9]+}}, f32, [(0, 1, {{511|1023}})]>) {{.*}} sync #sync.actions<
// BACKEND-NOT: #twu.access

// STRAT: m100-opt: error: m100-schedule: unknown strategy 'magic' (known: auto, data-parallel, pipeline, single)
// FIT:   m100-opt: error: op 'ew1' ('linalg.generic' (%r) in @wide, op #{{[0-9]+}}) (cvu.elementwise): no tiling of its 2x100000 piece fits the HBSM budget of 65536 bytes per TPB; the smallest tiling (1x100000) needs 1600000 bytes. Use more TPBs or a machine with a larger HBSM.
// TPBS:  m100-opt: error: tpbs=9 but machine 'tiny' has 2
