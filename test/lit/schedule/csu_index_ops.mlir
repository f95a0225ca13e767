// RUN: m100-opt %S/Inputs/gather_axis1.mlir -p 'm100-graph,m100-schedule{machine=tiny}' | filecheck %s
// RUN: m100-opt %S/Inputs/argmax_axis0.mlir -p 'm100-graph,m100-schedule{machine=tiny}' | filecheck %s --check-prefix=ARG
// RUN: not m100-opt %S/Inputs/gather_bad.mlir -p 'm100-graph,m100-schedule{machine=tiny}' 2>&1 | filecheck %s --check-prefix=BAD

// ONNX Gather(axis=1) of a [3,5,4] input with int64 [2,2] indices: the indices are normalised on
// the CVU's integer lane (select(idx < 0, idx + 5, idx), the compare fused into the select by
// fuse-predicates), turned into row indices o * 5 + idx of the table viewed
// as [15, 4] rows, and one CSU gather routine writes the [12, 4] rows of the output.
// CHECK-DAG:  tpb.symbol "i" input 2x2xi32
// CHECK-DAG:  stages = [#tpb.stage<add(in0, 5.0)>]
// CHECK-DAG:  stages = [#tpb.stage<cmp_gt(0.0, in2)>, #tpb.stage<select(s0, in0, in1)>]
// CHECK-DAG:  in_shapes = [array<i64: 1, 1, 4>, array<i64: 3, 1, 1>], out_shape = array<i64: 3, 1, 4>, stages = [#tpb.stage<add(in0, in1)>]
// CHECK:      tpb.csu tpb {{[0-9]+}} op0(%{{[0-9]+}}) op1(%{{[0-9]+}}) op2(%{{[0-9]+}}) after({{.*}}) {routine = "gather", params = array<i64: 15, 4, 12>

// ArgMax(axis=0, keepdims) of [3,8]: one CSU argmax over rows [8, 3] read through a transposing
// walk, first maximum (largest = 1, last = 0), the index written as i32.
// ARG-DAG:    tpb.symbol "i" output 1x8xi32
// ARG:        tpb.csu tpb 0 op0(%{{[0-9]+}}, #twu.access<affine_map<(d0, d1, d2) -> (d0, d2, d1)>, [1, 8, 3]>) op1(%{{[0-9]+}}) {routine = "argmax", params = array<i64: 8, 3, 1, 0>

// BAD: m100-opt: error: 'linalg.generic' (%r) in @f, op #2: this gather form is not supported (one index input, one tensor.extract at index_cast(index) on one axis, linalg.index elsewhere)

// RUN: m100-opt %S/Inputs/topk.mlir -p 'm100-graph,m100-schedule{machine=tiny}' | filecheck %s --check-prefix=TOPK
// RUN: not m100-opt %S/Inputs/topk_bad.mlir -p 'm100-graph,m100-schedule{machine=tiny}' 2>&1 | filecheck %s --check-prefix=TOPKBAD
// ONNX TopK(k=2, axis=1, largest) of [3,6]: torch-mlir's index iota + tm_tensor.sort (>=) + slices
// become one CSU topk routine with K = L (a full sort, ties by the lower index; the iota is the
// routine's own index output) and two DMA slices of the first 2 columns.
// TOPK-DAG:   tpb.symbol "i" output 3x2xi32
// TOPK:       tpb.csu tpb 0 op0({{.*}}) op1({{.*}}) op2({{.*}}) {routine = "topk", params = array<i64: 3, 6, 6, 1>
// TOPK-COUNT-2: tpb.dma engine {{[01]}} src(%{{[0-9]+}}, #twu.access<affine_map<(d0, d1) -> (d0, d1)>, [3, 2]>)
// TOPKBAD: m100-opt: error: 'tm_tensor.sort' in @m, op #0: this sort is not supported (values and their index iota along the sorted dimension, compared by one cmpf/cmpi)
