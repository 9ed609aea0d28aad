// Compute throughput under HAMi-core's SM limit: launch a fixed busy kernel for SECONDS of wall time
// and print kernels completed per second as JSON. Usage: smloop [SECONDS]
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cuda_runtime.h>

__global__ void busy(float *out, int iters) {
  float a = threadIdx.x * 1e-3f, b = 1.0001f;
  for (int i = 0; i < iters; ++i) a = a * b + 1e-7f;
  if (a == -1.0f) out[blockIdx.x] = a;  // never true; keeps the loop
}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 5.0;
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) { printf("{\"error\": \"no device\"}\n"); return 1; }
  float *out;
  if (cudaMalloc(&out, 1 << 20) != cudaSuccess) { printf("{\"error\": \"cudaMalloc\"}\n"); return 1; }
  int blocks = prop.multiProcessorCount * 8, iters = 20000;
  busy<<<blocks, 256>>>(out, iters);  // warm-up
  cudaDeviceSynchronize();
  auto t0 = std::chrono::steady_clock::now();
  long kernels = 0;
  double elapsed = 0;
  while (elapsed < seconds) {
    for (int i = 0; i < 10; ++i) busy<<<blocks, 256>>>(out, iters);
    cudaDeviceSynchronize();
    kernels += 10;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  cudaError_t err = cudaGetLastError();
  printf("{\"sms\": %d, \"blocks\": %d, \"kernels\": %ld, \"seconds\": %.3f, \"kernels_per_s\": %.1f, \"error\": \"%s\"}\n",
         prop.multiProcessorCount, blocks, kernels, elapsed, kernels / elapsed,
         err == cudaSuccess ? "" : cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}
