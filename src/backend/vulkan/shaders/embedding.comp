#version 450
// embedding: y[t] = table[ids[t]] for a float table (fp32 or fp16). A table larger than one
// binding is bound in row chunks [row0, row1); ids outside the chunk are left to other dispatches.
#include "common.glsl"
layout(constant_id = 1) const bool TAB16 = false;
layout(constant_id = 2) const bool Y16 = false;
layout(std430, binding = 0) readonly buffer Ids { int ids[]; };
DECL_FBUF(1, tab, readonly)
DECL_FBUF(2, y, writeonly)
layout(push_constant) uniform PC { uint D, row0, row1, T; } pc;

void main() {
  const uint j = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
  if (j >= pc.D || t >= pc.T) return;
  const int id = ids[t];
  if (id < int(pc.row0) || id >= int(pc.row1)) return;
  const float v = LOADF(tab, TAB16, uint(id - int(pc.row0)) * pc.D + j);
  STOREF(y, Y16, t * pc.D + j, v);
}
