package simsched

import (
	"bytes"
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/headroomhq/headroom/llmd/internal/headroomtest"
)

// Two runs of the loop at one seed print the same figures: llm-d's
// scheduler, Headroom's plugins learning from their own entries and the
// oracle, to the last digit. What the simulator does not decide (the
// wall clock, goroutines' order) must not reach a pick, or a difference
// between two configs could be the machine's.
func TestTheLoopRepeatsARun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the P/D demo's loop twice; skipped with -short")
	}
	srv := newServer(t)
	bin := headroomtest.Binary(t)
	run := func() []byte {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "demo", "--pd", "zones", "--seed", "2", "--llmd", srv.URL,
			"--duration", "40s", "--json", "--quiet")
		cmd.Env = append(cmd.Environ(), "TMPDIR="+t.TempDir())
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("headroom demo: %v\n%s", err, stderr.Bytes())
		}
		return out
	}
	first, again := run(), run()
	if !bytes.Equal(first, again) {
		t.Errorf("two runs of zones, seed 2 differ:\n%s\nthen\n%s", first, again)
	}
}
