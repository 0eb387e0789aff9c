package xgboost

import (
	"slices"
	"strings"
)

// hugePages is the glibc tunable under which xgboost's allocator backs its
// large allocations with transparent huge pages (madvise). A run zeroes tens
// of megabytes of buffers and histograms, even on a few rows, and on 4 KB
// pages the kernel's page faults under that zeroing are a large share of
// its CPU (on a hypervisor, larger); on 2 MB pages there are a fraction as
// many (PERFORMANCE.md, Retraining). It changes where memory comes from,
// never what is computed: the model written is byte for byte the same. A
// kernel with transparent huge pages off, or a glibc without the tunable
// (before 2.35), ignores it.
const hugePages = "GLIBC_TUNABLES=glibc.malloc.hugetlb=1"

// oneOpenMPThread keeps the OpenMP runtime to the one thread the run
// computes on. nthread = 1 bounds XGBoost's own loops, but libgomp still
// starts a team of a thread per core for a parallel region outside them,
// and the extra thread spins waiting for work that never comes, on the core
// a predictor beside the trainer would use (PERFORMANCE.md, Retraining).
// The computation is nthread's, so the model is the same byte for byte. It replaces an OMP_NUM_THREADS the trainer has: a run is
// single-threaded whatever the trainer's process is given.
const oneOpenMPThread = "OMP_NUM_THREADS=1"

// runEnv is the environment xgboost runs in: the trainer's, with
// oneOpenMPThread in place of its OMP_NUM_THREADS, and with hugePages unless
// the trainer's environment sets GLIBC_TUNABLES itself, which is then left
// as the operator set it.
func runEnv(environ []string) []string {
	env := slices.DeleteFunc(slices.Clone(environ), func(kv string) bool {
		return strings.HasPrefix(kv, "OMP_NUM_THREADS=")
	})
	env = append(env, oneOpenMPThread)
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "GLIBC_TUNABLES=") }) {
		env = append(env, hugePages)
	}
	return env
}
