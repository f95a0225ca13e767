// Reductions and softmax along any axes: a transposing walk onto the CVU's last-axis operations
// (passes/schedule/reduce_walk.py); composed math longer than one CVU pipeline is split.
// RUN: m100-opt %S/Inputs/reduce_axis0_2.mlir -p 'm100-graph,m100-schedule{machine=tiny}' | filecheck %s
// RUN: m100-opt %S/Inputs/softmax_axis0.mlir -p 'm100-graph,m100-schedule{machine=tiny}' | filecheck %s --check-prefix=SM
// RUN: m100-opt %S/Inputs/asinh.mlir -p 'm100-graph,m100-schedule{machine=tiny}' | filecheck %s --check-prefix=SPLIT
// RUN: not m100-opt %S/Inputs/reduce_mixed_maps.mlir -p 'm100-graph,m100-schedule{machine=tiny}' 2>&1 | filecheck %s --check-prefix=MIXED

// sum(x*x) over dims 0 and 2 of 6x4x8: the kept dim 1 goes first (a DMA transpose), the two
// reduced dims become one row of 48, one rsum along it, the result reshaped to 4x1.
// CHECK:     tpb.symbol "result0" output 4x1xf32
// CHECK:     tpb.dma engine {{[01]}} src(%0, #twu.access<affine_map<(d0, d1, d2) -> (d1, d0, d2)>, [4, 6, 8]>)
// CHECK:     tpb.cvu tpb 0 {{.*}} {in_shapes = [array<i64: 2, 1, 48>], out_shape = array<i64: 2, 1, 1>, stages = [#tpb.stage<mul(in0, in0)>, #tpb.stage<rsum(s0)>]

// softmax along axis 0 of 6x8: transpose, softmax along the last axis, transpose back -- the
// softmax's pieces store straight into the transposed result (from_ir/writer_maps: a flat walk
// of the 6x8 result, element (r, c) of the 8x6 softmax at c * 8 + r; no DMA transpose back).
// SM:        tpb.dma engine {{[01]}} src(%0, #twu.access<affine_map<(d0, d1) -> (d1, d0)>, [8, 6]>)
// SM:        tpb.cvu tpb 0 {{.*}}stages = [#tpb.stage<softmax(in0)>]
// SM:        tpb.dma engine {{[01]}} src(%{{[0-9]+}}) dst(%{{[0-9]+}}, #twu.access<affine_map<(d0, d1, d2) -> ((d0 + (d2 * 8)))>, [4, 1, 6]>)
// SM-NOT:    #twu.access<affine_map<(d0, d1) -> (d1, d0)>, [6, 8]>

// asinh is 20 CVU stages: several pipelines of at most 8 (cvu_max_stages of 'tiny'), the last one
// selecting the series near 0 or the log form.
// SPLIT:     tpb.cvu tpb {{[01]}} {{.*}}stages = [#tpb.stage<abs(in0)>, #tpb.stage<mul(s0, s0)>, #tpb.stage<add(s1, 1.0)>, #tpb.stage<sqrt(s2)>, #tpb.stage<add(s0, s3)>, #tpb.stage<log(s4)>]
// SPLIT:     #tpb.stage<sign(in0)>
// SPLIT:     #tpb.stage<cmp_gt(0.25, s2)>, #tpb.stage<select(s3, s1, in2)>]

// MIXED: m100-opt: error: 'linalg.generic' (%r) in @mixed, op #3: a reduction's inputs must all be indexed by the same permutation of its loops
