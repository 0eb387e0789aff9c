package suite

import (
	"context"
	"math"
	"os/exec"
	"testing"

	"github.com/headroomhq/headroom/lab/eval"
	"github.com/headroomhq/headroom/xgboost"
)

func TestLeastSquaresRecoversALine(t *testing.T) {
	// y = 3 + 2a − 0.5b exactly; the third column is never used.
	var X [][]float64
	var y []float64
	for i := range 40 {
		a, b := float64(i%7), float64(i*i%11)
		X = append(X, []float64{1, a, b, 0})
		y = append(y, 3+2*a-0.5*b)
	}
	beta, err := leastSquares(X, y)
	if err != nil {
		t.Fatal(err)
	}
	for j, want := range []float64{3, 2, -0.5, 0} {
		if math.Abs(beta[j]-want) > 1e-6 {
			t.Errorf("coefficient %d = %v, want %v (all %v)", j, beta[j], want, beta)
		}
	}
}

// On a P/D trace the transfer lines score every model on the same held-out
// transfers; Headroom's law, the simulator's own form, fits within the
// issue's 10%-class error, and a trace without transfers has no such line.
func TestTransferLines(t *testing.T) {
	if testing.Short() {
		t.Skip("trains xgboost baselines at every refit; skipped with -short")
	}
	if _, err := exec.LookPath("xgboost"); err != nil {
		t.Skip("xgboost CLI not installed (apt-get install xgboost)")
	}
	tr := pdTrace(t)
	samples, err := tr.Samples(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	transfers := len(measured(samples))
	opts := eval.Options{XGBoost: xgboost.CLI{TempDir: t.TempDir()}, Quantile: 0.9}
	split, ok, err := transferSplit(context.Background(), samples, opts, 2)
	if err != nil || !ok {
		t.Fatalf("split: %v, line %v", err, ok)
	}
	preq, ok, err := transferPrequential(context.Background(), samples, opts, 100)
	if err != nil || !ok {
		t.Fatalf("prequential: %v, line %v", err, ok)
	}
	if want := 2 * int(math.Round(transferPart*float64(transfers))); split.Rows != want {
		t.Errorf("split scored %d transfers, want a tenth of %d per seed, 2 seeds: %d", split.Rows, transfers, want)
	}
	if preq.Rows < transfers/2 || preq.Rows > transfers-minTransferFit {
		t.Errorf("prequential scored %d of %d transfers", preq.Rows, transfers)
	}
	for _, l := range []Line{split, preq} {
		t.Logf("%s: %d rows, MAPE %v, coverage %.1f%%", l.Mode, l.Rows, l.MAPE, l.Coverage)
		if l.Target != "kv_transfer" {
			t.Errorf("target %q", l.Target)
		}
		for _, name := range append([]string{eval.ModelHeadroom}, Baselines...) {
			if v, ok := l.MAPE[name]; !ok || !(v > 0) {
				t.Errorf("%s: no %s figure", l.Mode, name)
			}
		}
		if h := l.MAPE[eval.ModelHeadroom]; h > 15 {
			t.Errorf("%s: Headroom's transfer MAPE %.1f%%; the law is the simulator's own form", l.Mode, h)
		}
		if want := l.MAPE[eval.ModelHeadroom] / l.MAPE[l.Best]; l.Ratio != want {
			t.Errorf("%s: ratio %v, want %v", l.Mode, l.Ratio, want)
		}
		if l.Coverage < 60 || l.Coverage > 100 {
			t.Errorf("%s: coverage of the 0.9 quantile %.1f%%", l.Mode, l.Coverage)
		}
	}

	mono := Default().Traces[0]
	mono.Workload.Requests = 100
	rows, err := mono.Samples(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := transferSplit(context.Background(), rows, opts, 1); ok || err != nil {
		t.Errorf("a monolithic trace got a split transfer line (%v)", err)
	}
	if _, ok, err := transferPrequential(context.Background(), rows, opts, 100); ok || err != nil {
		t.Errorf("a monolithic trace got a prequential transfer line (%v)", err)
	}
}
