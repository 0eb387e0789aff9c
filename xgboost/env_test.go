package xgboost

import (
	"bytes"
	"context"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestRunEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		environ []string
		want    []string
	}{
		{"empty", nil, []string{hugePages}},
		{"added", []string{"PATH=/bin", "HOME=/root"}, []string{"PATH=/bin", "HOME=/root", hugePages}},
		{"operator's kept", []string{"PATH=/bin", "GLIBC_TUNABLES=glibc.malloc.arena_max=2"}, []string{"PATH=/bin", "GLIBC_TUNABLES=glibc.malloc.arena_max=2"}},
		{"operator's empty kept", []string{"GLIBC_TUNABLES="}, []string{"GLIBC_TUNABLES="}},
		{"a lookalike is not it", []string{"MY_GLIBC_TUNABLES=x"}, []string{"MY_GLIBC_TUNABLES=x", hugePages}},
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

// The huge-page tunable changes where xgboost's memory comes from, never
// the model: a run under it writes the same file as one with the operator's
// (here empty) GLIBC_TUNABLES, which runEnv leaves alone.
func TestHugePagesLeaveTheModelAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("trains xgboost twice; skipped with -short")
	}
	x := requireCLI(t)
	ctx := context.Background()
	X, y := syntheticRows(rand.New(rand.NewPCG(3, 4)), 3000)
	p := DefaultParams()
	p.Rounds = 50
	_, withHugePages, err := x.train(ctx, X, y, nil, mean(y), p)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("GLIBC_TUNABLES", "")
	_, without, err := x.train(ctx, X, y, nil, mean(y), p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(withHugePages, without) {
		t.Errorf("the model written with %s differs from the one without it", hugePages)
	}
}
