// A grid-wide barrier for a resident grid: every workgroup of the dispatch runs at once (the host
// dispatches no more workgroups than the device holds: DeviceInfo::compute_units), so a workgroup
// may wait for all the others inside one dispatch instead of ending it and letting the next
// dispatch start behind a pipeline barrier.
// Counters (GS_BINDING, three words, zero before the first dispatch): [0] arrivals, [1] exits,
// [2] an error flag. The sync counts arrivals against a target that grows with each sync, so the
// counter is never reset between syncs; the last workgroup to leave (grid_exit) resets it for the
// next dispatch. A workgroup that waits too long (a device that did not run the grid at once)
// sets the error flag and goes on, so a wrong residency guess gives a wrong result the host sees
// (gs_ctr[2] != 0) rather than a hung GPU.
// Data that one workgroup writes before a sync and another reads after it must be declared
// `coherent` (loads bypass caches that are not coherent across compute units).
// GS_SPIN: the specialization constant of the spin limit (the host's, vk_context.h
// grid_spin_limit). Bit 31 clear (GPUs): polls of the counter one wait makes, one a loop iteration
// (a few seconds of polling). Bit 31 set (CPU devices): the low bits are the loop iterations of
// the whole dispatch's waits, each iteration GS_CPU_POLLS polls in straight-line code. llvmpipe
// (lavapipe) ends every loop of an invocation once the invocation has run 65,535 loop iterations
// in all, silently: a wait counted in polls alone would end early there (the grid passing a sync
// before every workgroup arrived) and leave the invocation's later loops one iteration each. A
// wait that ends without seeing its target sets the error flag, however its loop ended.
layout(std430, binding = GS_BINDING) coherent buffer GridSync { uint gs_ctr[]; };
layout(constant_id = GS_SPIN) const uint GS_SPIN_LIMIT = 1u << 22;
const bool GS_CPU = (GS_SPIN_LIMIT & 0x80000000u) != 0u;
const uint GS_CPU_POLLS = 256u;
uint gs_cpu_left = GS_SPIN_LIMIT & 0x7FFFFFFFu;  // (CPU devices) the dispatch's iterations left

uint grid_groups() { return gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_NumWorkGroups.z; }

// Sync number k of this dispatch (0, 1, ...) in two halves, so that a workgroup can issue work
// that needs no other workgroup's results (loads of weights, say) between its arrival and its
// wait: grid_arrive once this workgroup's writes before the sync are done, then grid_wait(k).
// Every workgroup calls both with every thread.
void grid_arrive() {
  memoryBarrierBuffer();
  barrier();
  if (gl_LocalInvocationIndex == 0u) atomicAdd(gs_ctr[0], 1u);
}
void grid_wait(uint k) {
  if (gl_LocalInvocationIndex == 0u) {
    const uint target = (k + 1u) * grid_groups();
    bool seen = false;
    if (GS_CPU) {
      for (; !seen && gs_cpu_left > 0u; --gs_cpu_left) {
        uint c = 0u;
        [[unroll]] for (uint i = 0u; i < GS_CPU_POLLS; ++i) c = max(c, atomicAdd(gs_ctr[0], 0u));
        seen = c >= target;
      }
    } else {
      for (uint spins = 0u; !seen && spins <= GS_SPIN_LIMIT; ++spins)
        seen = atomicAdd(gs_ctr[0], 0u) >= target;
    }
    if (!seen) atomicOr(gs_ctr[2], 1u);
  }
  barrier();
  memoryBarrierBuffer();
}
void grid_sync(uint k) {
  grid_arrive();
  grid_wait(k);
}

// Once per workgroup, after its last sync: the last to leave zeroes the arrival counter.
void grid_exit() {
  if (gl_LocalInvocationIndex == 0u && atomicAdd(gs_ctr[1], 1u) == grid_groups() - 1u) {
    atomicExchange(gs_ctr[0], 0u);
    atomicExchange(gs_ctr[1], 0u);
  }
}
