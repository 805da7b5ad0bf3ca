#version 450
// Between the steps of a batch of greedy decode steps in one submit: the step's argmax becomes the
// next step's input token and the batch's i-th output, and the position advances by one.
#define WG 1
#include "common.glsl"
layout(std430, binding = 0) buffer STEP { uint step_pos; };
layout(std430, binding = 1) readonly buffer NEXT { int next_token; };
layout(std430, binding = 2) writeonly buffer IDS { int ids[]; };
layout(std430, binding = 3) writeonly buffer TOK { int tokens[]; };
layout(push_constant) uniform PC { uint i; } pc;

void main() {
  ids[0] = next_token;
  tokens[pc.i] = next_token;
  step_pos = step_pos + 1u;
}
