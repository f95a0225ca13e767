// RUN: m100-opt %s --split-input-file --verify-diagnostics | filecheck %s
// Negative tests: every sync op verifier (and machine checks of the SU actions on a tpb op).

%j = sync.join
// CHECK: 'sync.join' needs at least one token to join

// -----
tpb.program "tiny" placed {
  %b = sync.barrier mask 4
}
// CHECK: 'sync.barrier': TPB mask 0x4 names a TPB that machine 'tiny' (2 TPBs) does not have

// -----
%b = sync.barrier mask 0
// CHECK: 'sync.barrier': TPB mask 0 names no TPB

// -----
tpb.program "tiny" resolved {
  tpb.stream cluster 0 {
    %t = tpb.fill tpb 0 dst(#twu.walk<hbsm[0], 0, f32, [(0, 1, 15)]>) sync #sync.actions<blocks = 1, updates = [#sync.update<counter = 16, mask = 1>]> {value = 0.0}
  }
}
// CHECK: 'tpb.fill' (tpb 0): sync: counter 16 out of range (the SU has 16 counters)

// -----
tpb.program "tiny" resolved {
  tpb.stream cluster 0 {
    %t = tpb.fill tpb 1 dst(#twu.walk<hbsm[1], 0, f32, [(0, 1, 15)]>) sync #sync.actions<blocks = 1, monitors = [#sync.monitor<tpb = 0, counter = 1, expected = 1>]> {value = 0.0}
  }
}
// CHECK: 'tpb.fill' (tpb 1): sync: a TPB unit monitors its own SU only (TPB 1), not TPB 0
