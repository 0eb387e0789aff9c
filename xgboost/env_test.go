package xgboost

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestRunEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		environ []string
		want    []string
	}{
		{"empty", nil, []string{oneOpenMPThread, hugePages}},
		{"added", []string{"PATH=/bin", "HOME=/root"}, []string{"PATH=/bin", "HOME=/root", oneOpenMPThread, hugePages}},
		{"operator's tunables kept", []string{"PATH=/bin", "GLIBC_TUNABLES=glibc.malloc.arena_max=2"}, []string{"PATH=/bin", "GLIBC_TUNABLES=glibc.malloc.arena_max=2", oneOpenMPThread}},
		{"operator's empty tunables kept", []string{"GLIBC_TUNABLES="}, []string{"GLIBC_TUNABLES=", oneOpenMPThread}},
		{"a lookalike is not it", []string{"MY_GLIBC_TUNABLES=x", "MY_OMP_NUM_THREADS=4"}, []string{"MY_GLIBC_TUNABLES=x", "MY_OMP_NUM_THREADS=4", oneOpenMPThread, hugePages}},
		{"the trainer's threads replaced", []string{"OMP_NUM_THREADS=8", "PATH=/bin", "OMP_NUM_THREADS="}, []string{"PATH=/bin", oneOpenMPThread, hugePages}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.environ)
			if got := runEnv(in); !slices.Equal(got, tc.want) {
				t.Errorf("runEnv(%q) = %q, want %q", tc.environ, got, tc.want)
			}
			if !slices.Equal(in, tc.environ) {
				t.Errorf("runEnv changed its argument to %q", in)
			}
		})
	}
}

// The huge-page tunable changes where xgboost's memory comes from, and the
// one OpenMP thread how many threads wait, never the model: a run in
// runEnv's environment writes the same file as the CLI run in the
// trainer's environment without either (libgomp then starts a thread per
// core).
func TestRunEnvLeavesTheModelAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("trains xgboost twice; skipped with -short")
	}
	x := requireCLI(t)
	ctx := context.Background()
	X, y := syntheticRows(rand.New(rand.NewPCG(3, 4)), 3000)
	p := DefaultParams()
	p.Rounds = 50
	_, withRunEnv, err := x.train(ctx, X, y, nil, mean(y), p)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := writeMatrix(filepath.Join(dir, matrixFile), X, y, nil); err != nil {
		t.Fatal(err)
	}
	conf := append(trainConf(mean(y), p), `data = "`+matrixFile+`"`)
	if err := os.WriteFile(filepath.Join(dir, "train.conf"), confFile(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	bin, _ := x.Available()
	cmd := exec.CommandContext(ctx, bin, "train.conf")
	cmd.Dir = dir
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "GLIBC_TUNABLES=") || strings.HasPrefix(kv, "OMP_NUM_THREADS=")
	})
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	without, err := os.ReadFile(filepath.Join(dir, "model.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(withRunEnv, without) {
		t.Errorf("the model written with %s and %s differs from the one without them", hugePages, oneOpenMPThread)
	}
}
