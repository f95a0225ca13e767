// RUN: m100-opt %S/Inputs/int_reduce.mlir -p 'm100-graph,m100-schedule{machine=tiny}' | filecheck %s
// RUN: not m100-opt %S/Inputs/int_reduce_bad.mlir -p 'm100-graph,m100-schedule{machine=tiny}' 2>&1 | filecheck %s --check-prefix=BAD

// Integer ReduceMax / ReduceMin (torch-mlir: a max-with-index generic whose index is unused) are
// CVU reductions in the integer lane (passes/schedule/from_ir/cvu.py): maxsi from the type's
// smallest value is an rmax of the input; minui (uint8) from all ones reduces the zero-extended
// values and stores the result's 8 bits back (sext); along axis 0 through the transposing walk.
// CHECK-DAG: tpb.symbol "result0" output 3x5xi8
// CHECK-DAG: tpb.symbol "result1" output 5x4xi8
// (the transposing load may go ahead of the rmax: two transfers in flight per DMA engine)
// CHECK-DAG: tpb.cvu tpb {{[0-9]+}} {{.*}}stages = [#tpb.stage<rmax(in0)>]
// CHECK-DAG: tpb.dma engine {{[01]}} src(%1, #twu.access<affine_map<(d0, d1, d2) -> (d2, d0, d1)>, [5, 4, 3]>)
// CHECK:     tpb.cvu tpb {{[0-9]+}} {{.*}}stages = [#tpb.stage<zext(in0), iparams = [8]>, #tpb.stage<rmin(s0)>, #tpb.stage<sext(s1), iparams = [8]>]

// An i8 sum would have to wrap to i8 (no ONNX op makes one): refused in one line.
// BAD: m100-opt: error: 'linalg.generic' (%r) in @isum8, op #3: an i8 integer addi reduction (wrapping to i8) is not supported; widen it to int32 first
