// SPDX-License-Identifier: MIT
/*
 * What one process's GPU moves to and from pinned host memory, both ways
 * at once: the path every byte of a network plugin without GPUDirect takes
 * (Mesh and NCCL's Socket alike), with nothing else in the way.  By default
 * the GPU's own loads and stores move the data, as NCCL's kernels do with
 * host buffers; --ce uses the copy engines instead.  Two processes under
 * CUDA MPS show what two ranks sharing one GPU can move at most: the
 * ceiling of the one-GPU all-reduce runs (tests/gpu/host-link.sh).
 *
 *   host_link [--ce] [SECS] [BLOCKS] [THREADS] [RING_MB]
 *
 * RING_MB of host memory each way (default 32: NCCL's host buffers on one
 * rank, 4 channels x 8 MiB); BLOCKS x THREADS per direction (default 4 x
 * 512, NCCL's 4 channels).  Prints one JSON line with GB/s each way.
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include <cuda_runtime.h>

#define CHECK(call)                                                         \
	do {                                                                \
		cudaError_t e_ = (call);                                    \
		if (e_ != cudaSuccess) {                                    \
			fprintf(stderr, "host_link: %s: %s\n", #call,       \
				cudaGetErrorString(e_));                    \
			exit(1);                                            \
		}                                                           \
	} while (0)

/* Launches queued per stream before the clock is read again. */
#define BATCH 8

__global__ void copy16(const int4 *__restrict__ src, int4 *__restrict__ dst,
		       size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride)
		dst[i] = src[i];
}

struct dir {
	cudaStream_t stream;
	cudaEvent_t start, end;
	const void *src;
	void *dst;
	cudaMemcpyKind kind;
	unsigned long long copies;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void copy_once(struct dir *d, bool ce, size_t bytes, int blocks,
		      int threads)
{
	if (ce)
		CHECK(cudaMemcpyAsync(d->dst, d->src, bytes, d->kind,
				      d->stream));
	else
		copy16<<<blocks, threads, 0, d->stream>>>(
			(const int4 *)d->src, (int4 *)d->dst,
			bytes / sizeof(int4));
	d->copies++;
}

static double rate(const struct dir *d, size_t bytes)
{
	float ms = 0;

	CHECK(cudaEventElapsedTime(&ms, d->start, d->end));
	return ms > 0 ? (double)d->copies * bytes / (ms * 1e6) : 0;
}

int main(int argc, char **argv)
{
	bool ce = argc > 1 && !strcmp(argv[1], "--ce");
	int a = ce ? 2 : 1;
	double secs = argc > a ? atof(argv[a]) : 5;
	int blocks = argc > a + 1 ? atoi(argv[a + 1]) : 4;
	int threads = argc > a + 2 ? atoi(argv[a + 2]) : 512;
	size_t bytes = (size_t)(argc > a + 3 ? atoi(argv[a + 3]) : 32) << 20;
	void *dev_src, *dev_dst, *host_out, *host_in;
	struct dir dirs[2] = {};
	double t0;

	if (secs <= 0 || blocks < 1 || threads < 32 || !bytes) {
		fprintf(stderr, "usage: host_link [--ce] [SECS] [BLOCKS] "
				"[THREADS] [RING_MB]\n");
		return 2;
	}
	CHECK(cudaMalloc(&dev_src, bytes));
	CHECK(cudaMalloc(&dev_dst, bytes));
	CHECK(cudaHostAlloc(&host_out, bytes, cudaHostAllocMapped));
	CHECK(cudaHostAlloc(&host_in, bytes, cudaHostAllocMapped));
	CHECK(cudaMemset(dev_src, 1, bytes));
	memset(host_in, 2, bytes);
	dirs[0].src = dev_src;		/* device to host */
	dirs[0].dst = host_out;
	dirs[0].kind = cudaMemcpyDeviceToHost;
	dirs[1].src = host_in;		/* host to device */
	dirs[1].dst = dev_dst;
	dirs[1].kind = cudaMemcpyHostToDevice;
	for (struct dir &d : dirs) {
		CHECK(cudaStreamCreateWithFlags(&d.stream,
						cudaStreamNonBlocking));
		CHECK(cudaEventCreate(&d.start));
		CHECK(cudaEventCreate(&d.end));
		copy_once(&d, ce, bytes, blocks, threads);	/* warm-up */
	}
	CHECK(cudaDeviceSynchronize());
	for (struct dir &d : dirs) {
		d.copies = 0;
		CHECK(cudaEventRecord(d.start, d.stream));
	}
	t0 = now_s();
	while (now_s() - t0 < secs) {
		for (int i = 0; i < BATCH; i++)
			for (struct dir &d : dirs)
				copy_once(&d, ce, bytes, blocks, threads);
		for (struct dir &d : dirs)
			CHECK(cudaStreamSynchronize(d.stream));
	}
	for (struct dir &d : dirs)
		CHECK(cudaEventRecord(d.end, d.stream));
	CHECK(cudaDeviceSynchronize());
	printf("{\"mode\": \"%s\", \"blocks\": %d, \"threads\": %d, "
	       "\"ring_mb\": %zu, \"d2h_GBps\": %.2f, \"h2d_GBps\": %.2f}\n",
	       ce ? "ce" : "sm", blocks, threads, bytes >> 20,
	       rate(&dirs[0], bytes), rate(&dirs[1], bytes));
	return 0;
}
