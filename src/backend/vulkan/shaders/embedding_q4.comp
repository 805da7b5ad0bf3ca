#version 450
// embedding_q4: y[t, j] = q[ids[t], j] * s[ids[t], j / G], int4 table in row chunks [row0, row1).
#include "common.glsl"
layout(constant_id = 1) const bool Y16 = false;
layout(std430, binding = 0) readonly buffer Ids { int ids[]; };
layout(std430, binding = 1) readonly buffer Q { uint q[]; };
layout(std430, binding = 2) readonly buffer S { float s[]; };
DECL_FBUF(3, y, writeonly)
layout(push_constant) uniform PC { uint D, G, row0, row1, T, row_bytes; } pc;

void main() {
  const uint j = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
  if (j >= pc.D || t >= pc.T) return;
  const int id = ids[t];
  if (id < int(pc.row0) || id >= int(pc.row1)) return;
  const uint r = uint(id - int(pc.row0));
  const uint b = BYTE_AT(q, r * pc.row_bytes + j / 2u);
  const int nib = int((j & 1u) != 0u ? (b >> 4) : (b & 15u)) - 8;
  const float v = float(nib) * s[r * (pc.D / pc.G) + j / pc.G];
  STOREF(y, Y16, t * pc.D + j, v);
}
