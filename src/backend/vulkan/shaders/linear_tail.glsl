// Shared tail of the linear kernels: each thread holds acc[TT] partial sums for TT tokens of one
// output row; reduce over the workgroup and store y[t0 + i, n0 + n].
  [[unroll]] for (uint i = 0; i < TT; ++i) red[i][tid] = acc[i];
  barrier();
  [[unroll]] for (uint s = WG / 2; s > 0; s >>= 1) {
    if (tid < s) {
      [[unroll]] for (uint i = 0; i < TT; ++i) red[i][tid] += red[i][tid + s];
    }
    barrier();
  }
