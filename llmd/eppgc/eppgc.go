// Package eppgc chooses the garbage collection settings of an endpoint
// picker process that runs Headroom's plugins (cmd/headroom-epp).
//
// Why an EPP needs its own: the plugins ask a predictor beside the EPP
// over HTTP within each scheduling decision, and the calls that meet one
// of the EPP's mark phases wait milliseconds for an answer the predictor
// wrote in well under one (the mark workers hold the processors the
// caller needs back). With Go's default GOGC (100) the EPP's live heap,
// llm-d's prefix index for the most part, is marked several times a
// second, and those calls are the tail of the plugins' overhead
// (BenchmarkSchedulingOverhead in package plugins, docs/PERFORMANCE.md).
// A higher GOGC marks the same live heap as often as the heap grows by
// GCPercent of it, so rarely; the price is memory, which a memory limit
// bounds: the collector runs whatever GOGC says once the heap nears it.
// Without a known limit the defaults are left alone, since an EPP's live
// heap grows with its prefix index and pool and nothing would bound
// GCPercent of it.
package eppgc

import (
	"io/fs"
	"math"
	"runtime/debug"
	"strconv"
	"strings"
)

// GCPercent is the GOGC an EPP runs with when its memory is bounded and
// GOGC is not set: the heap may grow to nine times what is live before a
// collection, where Go's default collects at twice.
const GCPercent = 800

// limitShare is the share of the container's memory limit given to the Go
// runtime as its soft limit (GOMEMLIMIT): the rest is for what the runtime
// does not count against it (the executable's pages, the kernel's socket
// buffers charged to the container).
const limitShare = 0.9

// Settings are the collector settings to apply to a process. The zero
// value changes nothing.
type Settings struct {
	// GCPercent is the GOGC to set; 0 leaves the runtime's (the GOGC
	// environment variable's, or Go's default).
	GCPercent int
	// MemoryLimit is the soft memory limit to set, in bytes; 0 leaves the
	// runtime's (GOMEMLIMIT's, or none).
	MemoryLimit int64
	// Why says, for a log line, where the settings came from.
	Why string
}

// Choose is the settings for a process whose environment lookup reads and
// whose container allows containerLimit bytes of memory (0: unknown or
// unlimited). What the environment sets is never overridden: GOMEMLIMIT
// set counts as a known limit (GOMEMLIMIT=off as none, the container's
// limit not applied), GOGC set leaves the collector's target.
func Choose(lookup func(string) (string, bool), containerLimit int64) Settings {
	_, gogcSet := lookup("GOGC")
	limit, limitSet := lookup("GOMEMLIMIT")
	var s Settings
	switch {
	case limitSet && limit == "off":
		return Settings{Why: "GOMEMLIMIT=off: no memory limit"}
	case limitSet:
		s.Why = "GOMEMLIMIT set"
	case containerLimit > 0:
		s.MemoryLimit = int64(limitShare * float64(containerLimit))
		s.Why = "the container's memory limit, " + strconv.FormatInt(containerLimit, 10) + " bytes"
	default:
		return Settings{Why: "no memory limit known, from GOMEMLIMIT or the container"}
	}
	if gogcSet {
		s.Why += "; GOGC set"
	} else {
		s.GCPercent = GCPercent
	}
	return s
}

// Apply applies s to the running process and returns a function that puts
// back the settings it replaced (for tests and benchmarks, which share
// their process with others).
func (s Settings) Apply() (restore func()) {
	gcPercent, memoryLimit := -2, int64(-1) // -2: not replaced
	if s.GCPercent != 0 {
		gcPercent = debug.SetGCPercent(s.GCPercent)
	}
	if s.MemoryLimit > 0 {
		memoryLimit = debug.SetMemoryLimit(s.MemoryLimit)
	}
	return func() {
		if gcPercent != -2 {
			debug.SetGCPercent(gcPercent)
		}
		if memoryLimit >= 0 {
			debug.SetMemoryLimit(memoryLimit)
		}
	}
}

// String is s as a log line's value.
func (s Settings) String() string {
	gc, limit := "unchanged", "unchanged"
	if s.GCPercent != 0 {
		gc = strconv.Itoa(s.GCPercent)
	}
	if s.MemoryLimit > 0 {
		limit = strconv.FormatInt(s.MemoryLimit, 10) + " bytes"
	}
	return "GOGC " + gc + ", memory limit " + limit + " (" + s.Why + ")"
}

// cgroupLimits are the files that hold a container's memory limit, seen
// from inside it, relative to the root: cgroup v2's, then v1's.
var cgroupLimits = []string{"sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes"}

// unlimited is where a cgroup v1 limit means none: v1 writes the largest
// page-aligned int64 for "no limit".
const unlimited = math.MaxInt64 / 2

// ContainerMemoryLimit is the memory limit of the container the process
// runs in, read from root (os.DirFS("/") in a process), in bytes; 0 when
// there is none or it cannot be read.
func ContainerMemoryLimit(root fs.FS) int64 {
	for _, name := range cgroupLimits {
		data, err := fs.ReadFile(root, name)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(data))
		if v == "max" {
			return 0
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n >= unlimited {
			return 0
		}
		return n
	}
	return 0
}
