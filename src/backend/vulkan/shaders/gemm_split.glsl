// K split over SK workgroups of a tile (linear_8da4w_mm.comp, linear_8da4w_mm_coopmat.comp; the
// host's GemmPlan::splits): where a forward's tiles are too few to fill the GPU (a batched decode
// step's 16-64 rows), workgroup z of a tile sums groups [z ng / SK, (z + 1) ng / SK) of K and
// keeps its tile's sums (before the tokens' scales) in the partial buffer; the last of the tile's
// SK workgroups to finish (a counter per tile) adds the SK sums in z order, applies the scales and
// stores y. The order depends on K, G and SK only, so the bits are the same whichever workgroup
// finishes last. SK = 1: the bindings are bound and never touched.
layout(constant_id = 14) const uint SK = 1;
layout(std430, binding = 6) coherent buffer SP { float split_part[]; };  // [SK][tiles][BT BN]
layout(std430, binding = 7) coherent buffer SC { uint split_count[]; };  // per tile; zero between uses

// This workgroup's groups of K: [x, y).
uvec2 split_groups(uint ng) {
  const uint z = gl_WorkGroupID.z;
  return uvec2(z * ng / SK, (z + 1u) * ng / SK);
}
uint split_tile() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }
uint split_at(uint z, uint i, uint elems) {
  return (z * gl_NumWorkGroups.x * gl_NumWorkGroups.y + split_tile()) * elems + i;
}
// Keeps element i (of `elems`: BT BN) of this workgroup's sums.
void split_keep(uint i, uint elems, float v) { split_part[split_at(gl_WorkGroupID.z, i, elems)] = v; }
shared uint split_last_wg;
// Once every thread kept its sums: whether this workgroup is its tile's last to finish (every
// other one's sums are then visible to it). The last one resets the counter.
bool split_last() {
  memoryBarrierBuffer();
  barrier();
  if (gl_LocalInvocationIndex == 0u) {
    const bool last = atomicAdd(split_count[split_tile()], 1u) == SK - 1u;
    split_last_wg = last ? 1u : 0u;
    if (last) split_count[split_tile()] = 0u;
  }
  barrier();
  memoryBarrierBuffer();
  return split_last_wg != 0u;
}
// Element i's sum over the tile's SK workgroups, in z order.
float split_sum(uint i, uint elems) {
  precise float v = split_part[split_at(0u, i, elems)];
  for (uint z = 1u; z < SK; ++z) {
    precise float w = v + split_part[split_at(z, i, elems)];
    v = w;
  }
  return v;
}
