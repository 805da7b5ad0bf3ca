// Shared row walk of the linear kernels (mat-vec shaped: one subgroup per output row).
// A workgroup owns R consecutive rows of the bound row chunk (R chosen by the host: one per
// subgroup on GPUs, more on CPU devices where workgroups are expensive) for a block of TT tokens;
// each subgroup walks its rows, its lanes stride along K, and subgroupAdd reduces: no shared
// memory and no barrier. Requires GL_KHR_shader_subgroup_arithmetic (checked at device open).
// TT: tokens per workgroup (the host uses 1 for a decode step, more for prefill).
layout(constant_id = 8) const uint TT = 4;
// The workgroup's index among those of its mat-vec (an includer running two in one dispatch
// defines it).
#ifndef MATVEC_GROUP
#define MATVEC_GROUP flat_group()
#endif

// The workgroup's first row and first token; false when the workgroup has no tokens.
bool matvec_block(uint Nc, uint R, uint T, out uint row0, out uint t0) {
  const uint nb = (Nc + R - 1u) / R, g = MATVEC_GROUP;
  row0 = (g % nb) * R;
  t0 = (g / nb) * TT;
  return t0 < T;
}
