package xgboost

import "strings"

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

// runEnv is the environment xgboost runs in: the trainer's, with
// hugePages unless the trainer's environment sets GLIBC_TUNABLES itself,
// which is then left as the operator set it.
func runEnv(environ []string) []string {
	for _, kv := range environ {
		if strings.HasPrefix(kv, "GLIBC_TUNABLES=") {
			return environ
		}
	}
	return append(environ[:len(environ):len(environ)], hugePages)
}
