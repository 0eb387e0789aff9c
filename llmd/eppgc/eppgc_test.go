package eppgc

import (
	"runtime/debug"
	"testing"
	"testing/fstest"
)

func TestChoose(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		name           string
		env            map[string]string
		containerLimit int64
		want           Settings
	}{
		{name: "a container limit bounds a higher GOGC", containerLimit: 10 * gib,
			want: Settings{GCPercent: GCPercent, MemoryLimit: int64(0.9 * 10 * gib)}},
		{name: "GOMEMLIMIT is a known limit", env: map[string]string{"GOMEMLIMIT": "12GiB"}, containerLimit: 10 * gib,
			want: Settings{GCPercent: GCPercent}},
		{name: "GOGC set is kept", env: map[string]string{"GOGC": "50"}, containerLimit: 10 * gib,
			want: Settings{MemoryLimit: int64(0.9 * 10 * gib)}},
		{name: "both set: nothing to choose", env: map[string]string{"GOGC": "50", "GOMEMLIMIT": "12GiB"}, containerLimit: 10 * gib},
		{name: "GOMEMLIMIT=off is no limit, the container's not applied", env: map[string]string{"GOMEMLIMIT": "off"}, containerLimit: 10 * gib},
		{name: "no limit known: Go's defaults", env: map[string]string{}},
		{name: "GOGC alone, no limit: Go's defaults", env: map[string]string{"GOGC": "200"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			got := Choose(lookup, tc.containerLimit)
			if got.GCPercent != tc.want.GCPercent || got.MemoryLimit != tc.want.MemoryLimit {
				t.Errorf("Choose = GOGC %d, limit %d; want GOGC %d, limit %d (%s)", got.GCPercent, got.MemoryLimit, tc.want.GCPercent, tc.want.MemoryLimit, got)
			}
			if got.Why == "" {
				t.Error("Choose says nothing of why")
			}
		})
	}
}

func TestContainerMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
	}{
		{"cgroup v2 limit", map[string]string{"sys/fs/cgroup/memory.max": "17179869184\n"}, 17179869184},
		{"cgroup v2 without a limit", map[string]string{"sys/fs/cgroup/memory.max": "max\n"}, 0},
		{"cgroup v1 limit", map[string]string{"sys/fs/cgroup/memory/memory.limit_in_bytes": "8589934592\n"}, 8589934592},
		{"cgroup v1 without a limit", map[string]string{"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0},
		{"v2 read before v1", map[string]string{"sys/fs/cgroup/memory.max": "1073741824", "sys/fs/cgroup/memory/memory.limit_in_bytes": "2147483648"}, 1 << 30},
		{"unreadable value", map[string]string{"sys/fs/cgroup/memory.max": "lots"}, 0},
		{"no cgroup files", map[string]string{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fstest.MapFS{}
			for name, data := range tc.files {
				root[name] = &fstest.MapFile{Data: []byte(data)}
			}
			if got := ContainerMemoryLimit(root); got != tc.want {
				t.Errorf("ContainerMemoryLimit = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestApplyRestores applies settings to this process and checks that they
// took and that restore puts the runtime's back.
func TestApplyRestores(t *testing.T) {
	gc0 := debug.SetGCPercent(100)
	debug.SetGCPercent(gc0)
	limit0 := debug.SetMemoryLimit(-1)

	restore := Settings{GCPercent: GCPercent, MemoryLimit: 1 << 40}.Apply()
	gc := debug.SetGCPercent(GCPercent)
	limit := debug.SetMemoryLimit(-1)
	restore()
	if gc != GCPercent || limit != 1<<40 {
		t.Errorf("applied: GOGC %d, limit %d; want %d, %d", gc, limit, GCPercent, 1<<40)
	}
	if gc, limit := debug.SetGCPercent(gc0), debug.SetMemoryLimit(-1); gc != gc0 || limit != limit0 {
		t.Errorf("restored: GOGC %d, limit %d; want %d, %d", gc, limit, gc0, limit0)
	}

	Settings{}.Apply()()
	if gc, limit := debug.SetGCPercent(gc0), debug.SetMemoryLimit(-1); gc != gc0 || limit != limit0 {
		t.Errorf("the zero Settings changed GOGC to %d, the limit to %d", gc, limit)
	}
}
