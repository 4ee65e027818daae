/*
 * A stand-in for libcuda.so.1, for TestStubDriver: the functions the gpu
 * package binds, with the driver API's C prototypes, computing on host
 * memory. It tests the Go side's calls through purego against a C
 * library: argument passing (cuLaunchKernel's stack arguments, the
 * unsigned char of cuMemsetD8, the float of cuEventElapsedTime, char**),
 * the thread a call comes from (a context is current per thread) and the
 * release of everything before the primary context goes.
 *
 *   gcc -shared -fPIC -O1 -pthread -o libcuda.so.1 stubcuda.c
 *
 * -DSTUB_OLD leaves out cuDevicePrimaryCtxRelease_v2 (a driver too old).
 * STUB_CUINIT=<code> in the environment makes cuInit return that code.
 * Violations are printed to stderr with "stub: " and returned as errors.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream, *CUevent;

#define TOTAL (1ull << 30)
#define CTX_BYTES (64ull << 20)
#define MAXA 4096

enum { STREAM = 0x5757, EVENT = 0xe7e7, MODULE = 0x3030, FUNC = 0xf00f };

struct obj { int magic; };
struct stream { int magic; };
struct event { int magic; int recorded; struct timespec at; };
struct module { int magic; char *text; void *code; };
struct func { int magic; struct module *mod; char name[64]; };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int refs;
static char ctx_obj;
static __thread void *current;
static struct { char *p; size_t n; int host; } allocs[MAXA];
static int nallocs, live_objs;
static size_t used;

static CUresult bad(const char *call, const char *what, CUresult code) {
	fprintf(stderr, "stub: %s: %s\n", call, what);
	return code;
}

#define ENTER(call)                                               \
	pthread_mutex_lock(&mu);                                  \
	CUresult r_ = enter(call);                                \
	if (r_) { pthread_mutex_unlock(&mu); return r_; }
#define LEAVE(code) do { pthread_mutex_unlock(&mu); return (code); } while (0)

static CUresult enter(const char *call) {
	if (current != &ctx_obj)
		return bad(call, "no context current on this thread", 201);
	return 0;
}

static int find(const void *p, int host) {
	for (int i = 0; i < nallocs; i++)
		if (allocs[i].p == p && allocs[i].host == host)
			return i;
	return -1;
}

/* span checks that [p, p+n) lies in one device allocation. */
static int span(CUdeviceptr p, size_t n) {
	for (int i = 0; i < nallocs; i++) {
		uintptr_t b = (uintptr_t)allocs[i].p;
		if (!allocs[i].host && b <= p && p + n <= b + allocs[i].n)
			return 1;
	}
	return 0;
}

/* host checks that [p, p+n) lies in one pinned buffer, for the Async copies. */
static int pinned(const void *p, size_t n) {
	for (int i = 0; i < nallocs; i++) {
		const char *b = allocs[i].p;
		if (allocs[i].host && b <= (const char *)p && (const char *)p + n <= b + allocs[i].n)
			return 1;
	}
	return 0;
}

static int stream_ok(CUstream s) { return s == NULL || ((struct obj *)s)->magic == STREAM; }

static CUresult add(void *p, size_t n, int host) {
	if (nallocs == MAXA)
		return 2;
	allocs[nallocs].p = p;
	allocs[nallocs].n = n;
	allocs[nallocs].host = host;
	nallocs++;
	if (!host)
		used += n;
	return 0;
}

static void drop(int i) {
	if (!allocs[i].host)
		used -= allocs[i].n;
	free(allocs[i].p);
	allocs[i] = allocs[--nallocs];
}

CUresult cuInit(unsigned int flags) {
	const char *e = getenv("STUB_CUINIT");
	if (flags != 0)
		return bad("cuInit", "flags not 0", 1);
	return e ? atoi(e) : 0;
}

CUresult cuDriverGetVersion(int *v) { *v = 12040; return 0; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }

CUresult cuDeviceGet(CUdevice *d, int ordinal) {
	if (ordinal != 0)
		return 101;
	*d = 0;
	return 0;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
	if (d != 0 || len < 16)
		return bad("cuDeviceGetName", "bad device or length", 1);
	snprintf(name, len, "Stub GPU");
	return 0;
}

CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) {
	if (d != 0)
		return 101;
	*b = TOTAL;
	return 0;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
	if (d != 0)
		return 101;
	pthread_mutex_lock(&mu);
	refs++;
	*c = &ctx_obj;
	pthread_mutex_unlock(&mu);
	return 0;
}

#ifndef STUB_OLD
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
	CUresult r = 0;
	if (d != 0)
		return 101;
	pthread_mutex_lock(&mu);
	if (refs == 0)
		r = bad("cuDevicePrimaryCtxRelease_v2", "not retained", 201);
	else if (--refs == 0 && (nallocs || live_objs)) {
		fprintf(stderr, "stub: context destroyed with %d allocations and %d objects left\n", nallocs, live_objs);
		while (nallocs)
			drop(0);
		r = 999;
	}
	pthread_mutex_unlock(&mu);
	return r;
}
#endif

CUresult cuCtxSetCurrent(CUcontext c) {
	if (c != NULL && (c != &ctx_obj || refs == 0))
		return bad("cuCtxSetCurrent", "not a retained context", 201);
	current = c;
	return 0;
}

CUresult cuCtxSynchronize(void) { ENTER("cuCtxSynchronize"); LEAVE(0); }

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
	ENTER("cuMemAlloc_v2");
	if (n == 0)
		LEAVE(bad("cuMemAlloc_v2", "0 bytes", 1));
	if (n > TOTAL - used - CTX_BYTES)
		LEAVE(2);
	void *m = aligned_alloc(256, (n + 255) & ~(size_t)255);
	if (!m)
		LEAVE(2);
	CUresult r = add(m, n, 0);
	if (r) {
		free(m);
		LEAVE(r);
	}
	*p = (CUdeviceptr)(uintptr_t)m;
	LEAVE(0);
}

CUresult cuMemFree_v2(CUdeviceptr p) {
	ENTER("cuMemFree_v2");
	int i = find((void *)(uintptr_t)p, 0);
	if (i < 0)
		LEAVE(bad("cuMemFree_v2", "not allocated", 1));
	drop(i);
	LEAVE(0);
}

CUresult cuMemAllocHost_v2(void **pp, size_t n) {
	ENTER("cuMemAllocHost_v2");
	if (n == 0)
		LEAVE(bad("cuMemAllocHost_v2", "0 bytes", 1));
	void *m = malloc(n);
	if (!m)
		LEAVE(2);
	CUresult r = add(m, n, 1);
	if (r) {
		free(m);
		LEAVE(r);
	}
	*pp = m;
	LEAVE(0);
}

CUresult cuMemFreeHost(void *p) {
	ENTER("cuMemFreeHost");
	int i = find(p, 1);
	if (i < 0)
		LEAVE(bad("cuMemFreeHost", "not allocated", 1));
	drop(i);
	LEAVE(0);
}

static CUresult htod(const char *call, CUdeviceptr dst, const void *src, size_t n, CUstream s, int async) {
	ENTER(call);
	if (n == 0)
		LEAVE(bad(call, "0 bytes", 1));
	if (!stream_ok(s))
		LEAVE(bad(call, "bad stream", 400));
	if (!span(dst, n))
		LEAVE(1);
	if (async && !pinned(src, n))
		LEAVE(bad(call, "host memory not pinned", 1));
	memcpy((void *)(uintptr_t)dst, src, n);
	LEAVE(0);
}

static CUresult dtoh(const char *call, void *dst, CUdeviceptr src, size_t n, CUstream s, int async) {
	ENTER(call);
	if (n == 0)
		LEAVE(bad(call, "0 bytes", 1));
	if (!stream_ok(s))
		LEAVE(bad(call, "bad stream", 400));
	if (!span(src, n))
		LEAVE(1);
	if (async && !pinned(dst, n))
		LEAVE(bad(call, "host memory not pinned", 1));
	memcpy(dst, (void *)(uintptr_t)src, n);
	LEAVE(0);
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
	return htod("cuMemcpyHtoD_v2", dst, src, n, NULL, 0);
}
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
	return dtoh("cuMemcpyDtoH_v2", dst, src, n, NULL, 0);
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
	return htod("cuMemcpyHtoDAsync_v2", dst, src, n, s, 1);
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
	return dtoh("cuMemcpyDtoHAsync_v2", dst, src, n, s, 1);
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
	ENTER("cuMemcpyDtoD_v2");
	if (n == 0)
		LEAVE(bad("cuMemcpyDtoD_v2", "0 bytes", 1));
	if (!span(dst, n) || !span(src, n))
		LEAVE(1);
	memmove((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n);
	LEAVE(0);
}

CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char uc, size_t n) {
	ENTER("cuMemsetD8_v2");
	if (n == 0)
		LEAVE(bad("cuMemsetD8_v2", "0 bytes", 1));
	if (!span(dst, n))
		LEAVE(1);
	memset((void *)(uintptr_t)dst, uc, n);
	LEAVE(0);
}

CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) {
	ENTER("cuMemGetInfo_v2");
	*free_ = TOTAL - CTX_BYTES - used;
	*total = TOTAL;
	LEAVE(0);
}

CUresult cuModuleLoadData(CUmodule *m, const void *image) {
	ENTER("cuModuleLoadData");
	const char *text = image; /* PTX is read as a C string */
	if (!strstr(text, ".entry") || !strstr(text, ".version"))
		LEAVE(218);
	struct module *mod = calloc(1, sizeof *mod);
	mod->magic = MODULE;
	mod->text = strdup(text);
	/* The module's code takes device memory. */
	mod->code = aligned_alloc(256, 4096);
	add(mod->code, 4096, 0);
	live_objs++;
	*m = mod;
	LEAVE(0);
}

CUresult cuModuleUnload(CUmodule m) {
	ENTER("cuModuleUnload");
	struct module *mod = m;
	if (!mod || mod->magic != MODULE)
		LEAVE(bad("cuModuleUnload", "bad module", 400));
	drop(find(mod->code, 0));
	mod->magic = 0;
	free(mod->text);
	/* Its functions stay allocated (small) but are marked dead by the
	   module's magic. */
	live_objs--;
	LEAVE(0);
}

CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
	ENTER("cuModuleGetFunction");
	struct module *mod = m;
	char pat[96];
	if (!mod || mod->magic != MODULE)
		LEAVE(bad("cuModuleGetFunction", "bad module", 400));
	if (strlen(name) > 60)
		LEAVE(500);
	snprintf(pat, sizeof pat, ".entry %s(", name);
	if (!strstr(mod->text, pat))
		LEAVE(500);
	struct func *fn = calloc(1, sizeof *fn);
	fn->magic = FUNC;
	fn->mod = mod;
	strcpy(fn->name, name);
	*f = fn;
	LEAVE(0);
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz,
                        unsigned int shared, CUstream s, void **params, void **extra) {
	ENTER("cuLaunchKernel");
	struct func *fn = f;
	if (!fn || fn->magic != FUNC || fn->mod->magic != MODULE)
		LEAVE(bad("cuLaunchKernel", "bad function", 400));
	/* The tests launch 1-D grids without shared memory: anything else
	   here is an argument passed in the wrong place. */
	if (gy != 1 || gz != 1 || by != 1 || bz != 1 || shared != 0 || extra != NULL)
		LEAVE(bad("cuLaunchKernel", "unexpected y/z dimensions, shared bytes or extra", 1));
	if (gx == 0 || bx == 0 || bx > 1024)
		LEAVE(1);
	if (!stream_ok(s))
		LEAVE(bad("cuLaunchKernel", "bad stream", 400));
	if (params == NULL)
		LEAVE(bad("cuLaunchKernel", "no kernelParams", 1));
	unsigned long long threads = (unsigned long long)gx * bx;
	if (strcmp(fn->name, "add_u32") == 0) {
		CUdeviceptr data = *(CUdeviceptr *)params[0];
		unsigned int a = *(unsigned int *)params[1], n = *(unsigned int *)params[2];
		unsigned long long m = threads < n ? threads : n;
		if (m && !span(data, 4 * m))
			LEAVE(bad("cuLaunchKernel", "add_u32 out of bounds", 700));
		for (unsigned long long i = 0; i < m; i++)
			((uint32_t *)(uintptr_t)data)[i] += a;
	} else if (strcmp(fn->name, "store_args") == 0) {
		char *out = (char *)(uintptr_t) * (CUdeviceptr *)params[0];
		if (!span((CUdeviceptr)(uintptr_t)out, 40))
			LEAVE(bad("cuLaunchKernel", "store_args out of bounds", 700));
		memcpy(out, params[1], 4);
		memcpy(out + 8, params[2], 8);
		memcpy(out + 16, params[3], 4);
		memcpy(out + 24, params[4], 8);
		memcpy(out + 32, params[5], 4);
	} else {
		LEAVE(400);
	}
	LEAVE(0);
}

CUresult cuStreamCreate(CUstream *s, unsigned int flags) {
	ENTER("cuStreamCreate");
	struct stream *st = calloc(1, sizeof *st);
	st->magic = STREAM;
	live_objs++;
	*s = st;
	LEAVE(0);
}

CUresult cuStreamDestroy_v2(CUstream s) {
	ENTER("cuStreamDestroy_v2");
	struct stream *st = s;
	if (!st || st->magic != STREAM)
		LEAVE(bad("cuStreamDestroy_v2", "bad stream", 400));
	st->magic = 0;
	free(st);
	live_objs--;
	LEAVE(0);
}

CUresult cuStreamSynchronize(CUstream s) {
	ENTER("cuStreamSynchronize");
	if (!stream_ok(s))
		LEAVE(bad("cuStreamSynchronize", "bad stream", 400));
	LEAVE(0);
}

CUresult cuEventCreate(CUevent *e, unsigned int flags) {
	ENTER("cuEventCreate");
	struct event *ev = calloc(1, sizeof *ev);
	ev->magic = EVENT;
	live_objs++;
	*e = ev;
	LEAVE(0);
}

CUresult cuEventDestroy_v2(CUevent e) {
	ENTER("cuEventDestroy_v2");
	struct event *ev = e;
	if (!ev || ev->magic != EVENT)
		LEAVE(bad("cuEventDestroy_v2", "bad event", 400));
	ev->magic = 0;
	free(ev);
	live_objs--;
	LEAVE(0);
}

CUresult cuEventRecord(CUevent e, CUstream s) {
	ENTER("cuEventRecord");
	struct event *ev = e;
	if (!ev || ev->magic != EVENT || !stream_ok(s))
		LEAVE(bad("cuEventRecord", "bad event or stream", 400));
	clock_gettime(CLOCK_MONOTONIC, &ev->at);
	ev->recorded = 1;
	LEAVE(0);
}

CUresult cuEventSynchronize(CUevent e) {
	ENTER("cuEventSynchronize");
	struct event *ev = e;
	if (!ev || ev->magic != EVENT)
		LEAVE(bad("cuEventSynchronize", "bad event", 400));
	LEAVE(0);
}

CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
	ENTER("cuEventElapsedTime");
	struct event *s = a, *e = b;
	if (!s || !e || s->magic != EVENT || e->magic != EVENT || !s->recorded || !e->recorded)
		LEAVE(400);
	*ms = (float)((e->at.tv_sec - s->at.tv_sec) * 1e3 + (e->at.tv_nsec - s->at.tv_nsec) / 1e6);
	LEAVE(0);
}

CUresult cuGetErrorName(CUresult code, const char **name) {
	switch (code) {
	case 0: *name = "CUDA_SUCCESS"; return 0;
	case 1: *name = "CUDA_ERROR_INVALID_VALUE"; return 0;
	case 2: *name = "CUDA_ERROR_OUT_OF_MEMORY"; return 0;
	case 100: *name = "CUDA_ERROR_NO_DEVICE"; return 0;
	case 201: *name = "CUDA_ERROR_INVALID_CONTEXT"; return 0;
	case 218: *name = "CUDA_ERROR_INVALID_PTX"; return 0;
	case 400: *name = "CUDA_ERROR_INVALID_HANDLE"; return 0;
	case 500: *name = "CUDA_ERROR_NOT_FOUND"; return 0;
	case 700: *name = "CUDA_ERROR_ILLEGAL_ADDRESS"; return 0;
	case 999: *name = "CUDA_ERROR_UNKNOWN"; return 0;
	}
	*name = NULL;
	return 1;
}
