#version 450
// What a workgroup's subgroups look like on this device (vk_probe.cpp): for every invocation,
// gl_SubgroupSize, gl_SubgroupInvocationID, gl_SubgroupID, gl_NumSubgroups and, from a ballot,
// how many invocations of its subgroup are active and its rank among them. The kernels split
// their work by these numbers, so they must agree: full subgroups, lanes 0 .. size-1.
#extension GL_KHR_shader_subgroup_ballot : require
#define WG_SPEC
layout(local_size_x = 64, local_size_x_id = 1) in;
#include "common.glsl"
layout(std430, binding = 0) writeonly buffer OUT { uvec4 o[]; };

void main() {
  const uvec4 b = subgroupBallot(true);
  o[gl_LocalInvocationID.x] = uvec4(gl_SubgroupSize, gl_SubgroupInvocationID,
                                    gl_SubgroupID | (gl_NumSubgroups << 16),
                                    subgroupBallotBitCount(b) |
                                        (subgroupBallotExclusiveBitCount(b) << 16));
}
