package main

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
)

// `headroom eval --mode floor` prints every floor estimator for both
// targets, on the rows a prequential walk would score.
func TestEvalFloor(t *testing.T) {
	if testing.Short() {
		t.Skip("trains xgboost models over and over; skipped with -short")
	}
	if _, err := exec.LookPath("xgboost"); err != nil {
		t.Skip("xgboost CLI not installed (apt-get install xgboost)")
	}
	var stdout, stderr bytes.Buffer
	err := runEval(context.Background(), []string{"--synthetic", "--synthetic-rows", "400", "--mode", "floor", "--every", "100"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("eval --mode floor: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, "mode floor") || !strings.Contains(out, "blocks of 100 rows left out") {
		t.Errorf("heading missing:\n%s", out)
	}
	for _, target := range []string{"ttft", "tpot"} {
		for _, m := range []string{"headroom:hindsight", "linear:hindsight", "xgboost-log:hindsight", "knn:all-rows", "knn:window"} {
			found := false
			for _, line := range strings.Split(out, "\n") {
				f := strings.Fields(line)
				// 300 rows scored: the first block has no model in a walk.
				if len(f) > 3 && f[0] == target && f[1] == m && f[2] == "300" {
					found = true
				}
			}
			if !found {
				t.Errorf("no %s line for %s on 300 rows:\n%s", target, m, out)
			}
		}
	}
	if err := runEval(context.Background(), []string{"--synthetic", "--mode", "floor", "--every", "0"}, &stdout, &stderr); err == nil {
		t.Error("accepted blocks of 0 rows")
	}
}

// A prequential run prints each target's floor beside Headroom's figure,
// unless told not to.
func TestEvalPrequentialBesideFloor(t *testing.T) {
	if testing.Short() {
		t.Skip("trains xgboost models over and over; skipped with -short")
	}
	if _, err := exec.LookPath("xgboost"); err != nil {
		t.Skip("xgboost CLI not installed (apt-get install xgboost)")
	}
	args := []string{"--synthetic", "--synthetic-rows", "400", "--mode", "prequential", "--every", "100"}
	var stdout, stderr bytes.Buffer
	if err := runEval(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("eval --mode prequential: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, "headroom / floor") {
		t.Fatalf("no floor beside the prequential figures:\n%s", out)
	}
	for _, target := range []string{"ttft", "tpot"} {
		found := false
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 5 && f[0] == target && strings.HasSuffix(f[4], "x") {
				found = true
			}
		}
		if !found {
			t.Errorf("no floor line for %s:\n%s", target, out)
		}
	}
	stdout.Reset()
	if err := runEval(context.Background(), append(args, "--floor=false"), &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stdout.String(), "floor") {
		t.Errorf("--floor=false printed a floor:\n%s", stdout.String())
	}
}
