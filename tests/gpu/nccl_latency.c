/* SPDX-License-Identifier: MIT */
/*
 * All-reduce (or send/receive) time by size through real NCCL, driven
 * from C: one process a rank, the ranks launched by tests/gpu/latency.sh.
 * allreduce.py drives NCCL through PyTorch, whose own cost per call (tens
 * of microseconds of Python and bookkeeping) sits under small all-reduces;
 * here a loop of calls is queued on one stream and timed as a whole, so
 * what one call takes is NCCL's and the network's.
 *
 * Each rank sends (rank + 1) * pattern.  OP allreduce (the default): the
 * last result must be the exact sum.  OP sendrecv: as nccl-tests' sendrecv,
 * each rank sends to the next and receives from the one before, in one
 * group; the last result must be that rank's pattern.  The slowest rank's
 * time counts.  Rank 0 prints one JSON line a size:
 * {"bytes": N, "us": T, "exact": true}.
 *
 *   nccl_latency RANK NRANKS ID_FILE SIZES ITERS WARMUP [OP]
 *
 * SIZES: bytes, comma separated (multiples of 4).  Rank 0 writes NCCL's
 * unique id to ID_FILE, the others wait for it.  Exit 0: every result
 * exact; 1: a result wrong; 2: a setup or NCCL error.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <nccl.h>

#define PATTERN_MOD 1021
#define MAX_SIZES 32
#define ID_WAIT_S 120

static int fail(const char *what, const char *why)
{
	fprintf(stderr, "nccl_latency: %s: %s\n", what, why);
	return 2;
}

#define CUDA_OK(call)                                                    \
	do {                                                             \
		cudaError_t e_ = (call);                                 \
		if (e_ != cudaSuccess)                                   \
			return fail(#call, cudaGetErrorString(e_));      \
	} while (0)
#define NCCL_OK(call)                                                    \
	do {                                                             \
		ncclResult_t r_ = (call);                                \
		if (r_ != ncclSuccess)                                   \
			return fail(#call, ncclGetErrorString(r_));      \
	} while (0)

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Rank 0 publishes the id whole (write, then rename); the others wait. */
static int share_id(int rank, const char *path, ncclUniqueId *id)
{
	char tmp[4096];
	FILE *f;

	if (rank == 0) {
		NCCL_OK(ncclGetUniqueId(id));
		snprintf(tmp, sizeof(tmp), "%s.tmp", path);
		f = fopen(tmp, "wb");
		if (!f || fwrite(id, sizeof(*id), 1, f) != 1 || fclose(f) ||
		    rename(tmp, path))
			return fail(path, strerror(errno));
		return 0;
	}
	for (int i = 0; i < ID_WAIT_S * 10; i++) {
		f = fopen(path, "rb");
		if (f) {
			size_t n = fread(id, sizeof(*id), 1, f);

			fclose(f);
			if (n == 1)
				return 0;
		}
		usleep(100000);
	}
	return fail(path, "rank 0 wrote no id");
}

static int parse_sizes(const char *list, size_t *sizes, int *n)
{
	char *copy = strdup(list), *save = NULL, *tok;

	*n = 0;
	for (tok = strtok_r(copy, ",", &save); tok && *n < MAX_SIZES;
	     tok = strtok_r(NULL, ",", &save)) {
		char *end;
		unsigned long long v = strtoull(tok, &end, 10);

		if (*end || !v || v % 4) {
			free(copy);
			return fail(tok, "a size is a positive multiple of 4");
		}
		sizes[(*n)++] = (size_t)v;
	}
	free(copy);
	return *n ? 0 : fail(list, "no sizes");
}

static bool op_sendrecv;

/* One call of the operation timed, on BYTES of floats. */
static ncclResult_t op_call(const float *send, float *recv, size_t count,
			    ncclComm_t comm, cudaStream_t stream, int rank,
			    int nranks)
{
	ncclResult_t r, end;

	if (!op_sendrecv)
		return ncclAllReduce(send, recv, count, ncclFloat, ncclSum,
				     comm, stream);
	r = ncclGroupStart();
	if (r != ncclSuccess)
		return r;
	r = ncclSend(send, count, ncclFloat, (rank + 1) % nranks, comm, stream);
	if (r == ncclSuccess)
		r = ncclRecv(recv, count, ncclFloat,
			     (rank + nranks - 1) % nranks, comm, stream);
	end = ncclGroupEnd();
	return r != ncclSuccess ? r : end;
}

/* What element I of the last result must be. */
static float expected(size_t i, int rank, int nranks)
{
	size_t factor = op_sendrecv ? (size_t)((rank + nranks - 1) % nranks + 1)
				    : (size_t)(nranks * (nranks + 1) / 2);

	return (float)((i % PATTERN_MOD + 1) * factor);
}

/* One size: warm-up, a timed loop, the last result checked. */
static int run_size(ncclComm_t comm, cudaStream_t stream, int rank,
		    int nranks, size_t bytes, int iters, int warmup)
{
	size_t count = bytes / 4;
	float *host = malloc(bytes), *send, *recv;
	double *t_dev, t;
	int wrong = 0, *wrong_dev;

	if (!host)
		return fail("malloc", strerror(ENOMEM));
	CUDA_OK(cudaMalloc((void **)&send, bytes));
	CUDA_OK(cudaMalloc((void **)&recv, bytes));
	CUDA_OK(cudaMalloc((void **)&t_dev, sizeof(double)));
	CUDA_OK(cudaMalloc((void **)&wrong_dev, sizeof(int)));
	for (size_t i = 0; i < count; i++)
		host[i] = (float)((i % PATTERN_MOD + 1) * (size_t)(rank + 1));
	CUDA_OK(cudaMemcpy(send, host, bytes, cudaMemcpyHostToDevice));
	for (int i = 0; i < warmup; i++)
		NCCL_OK(op_call(send, recv, count, comm, stream, rank, nranks));
	CUDA_OK(cudaStreamSynchronize(stream));
	/* all ranks start the loop together */
	NCCL_OK(ncclAllReduce(send, recv, 1, ncclFloat, ncclSum, comm, stream));
	CUDA_OK(cudaStreamSynchronize(stream));
	CUDA_OK(cudaMemset(recv, 0, bytes));
	t = now_s();
	for (int i = 0; i < iters; i++)
		NCCL_OK(op_call(send, recv, count, comm, stream, rank, nranks));
	CUDA_OK(cudaStreamSynchronize(stream));
	t = now_s() - t;
	CUDA_OK(cudaMemcpy(host, recv, bytes, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < count && !wrong; i++)
		wrong = host[i] != expected(i, rank, nranks);
	/* the slowest rank's time; any rank's wrong result */
	CUDA_OK(cudaMemcpy(t_dev, &t, sizeof(t), cudaMemcpyHostToDevice));
	CUDA_OK(cudaMemcpy(wrong_dev, &wrong, sizeof(wrong),
			   cudaMemcpyHostToDevice));
	NCCL_OK(ncclAllReduce(t_dev, t_dev, 1, ncclDouble, ncclMax, comm,
			      stream));
	NCCL_OK(ncclAllReduce(wrong_dev, wrong_dev, 1, ncclInt, ncclMax, comm,
			      stream));
	CUDA_OK(cudaStreamSynchronize(stream));
	CUDA_OK(cudaMemcpy(&t, t_dev, sizeof(t), cudaMemcpyDeviceToHost));
	CUDA_OK(cudaMemcpy(&wrong, wrong_dev, sizeof(wrong),
			   cudaMemcpyDeviceToHost));
	if (rank == 0)
		printf("{\"bytes\": %zu, \"us\": %.2f, \"exact\": %s}\n", bytes,
		       t / iters * 1e6, wrong ? "false" : "true");
	fflush(stdout);
	cudaFree(send);
	cudaFree(recv);
	cudaFree(t_dev);
	cudaFree(wrong_dev);
	free(host);
	return wrong;
}

int main(int argc, char **argv)
{
	size_t sizes[MAX_SIZES];
	int rank, nranks, iters, warmup, nsizes, ndev, rc = 0;
	cudaStream_t stream;
	ncclUniqueId id;
	ncclComm_t comm;

	if (argc != 7 && argc != 8)
		return fail("usage", "nccl_latency RANK NRANKS ID_FILE SIZES "
			    "ITERS WARMUP [allreduce|sendrecv]");
	if (argc == 8 && strcmp(argv[7], "allreduce")) {
		if (strcmp(argv[7], "sendrecv"))
			return fail(argv[7], "OP is allreduce or sendrecv");
		op_sendrecv = true;
	}
	rank = atoi(argv[1]);
	nranks = atoi(argv[2]);
	iters = atoi(argv[5]);
	warmup = atoi(argv[6]);
	if (nranks < 2 || rank < 0 || rank >= nranks || iters < 1 ||
	    warmup < 0)
		return fail("usage", "bad RANK, NRANKS, ITERS or WARMUP");
	if (parse_sizes(argv[4], sizes, &nsizes))
		return 2;
	CUDA_OK(cudaGetDeviceCount(&ndev));
	CUDA_OK(cudaSetDevice(rank % ndev));
	if (share_id(rank, argv[3], &id))
		return 2;
	NCCL_OK(ncclCommInitRank(&comm, nranks, id, rank));
	CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
	for (int i = 0; i < nsizes && rc != 2; i++) {
		int r = run_size(comm, stream, rank, nranks, sizes[i], iters,
				 warmup);

		if (r > rc)
			rc = r;
	}
	cudaStreamDestroy(stream);
	ncclCommDestroy(comm);
	return rc;
}
