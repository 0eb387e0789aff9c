package eval_test

import (
	"context"
	"os/exec"
	"testing"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/eval"
	"github.com/headroomhq/headroom/lab/suite"
	"github.com/headroomhq/headroom/xgboost"
)

// The prefill-bound case, reproducibly: a quiet simulated server
// (eval/testdata/prefill-extrapolation.json), trained as the service would
// be on the prompts of at most 1,024 tokens, asked about those beyond
// 2,048. Its in-range errors are about 1%, so bounds calibrated in range
// alone covered 3% of the long prompts (docs/ACCURACY.md); with the
// widening the 90% bound covers at least 80% of them and the median bias
// stays within ±10%. Removing the widening fails this test.
func TestExtrapolatedBoundsCoverPrefillBoundPrompts(t *testing.T) {
	if testing.Short() {
		t.Skip("retrains with xgboost 20 times; skipped with -short")
	}
	if _, err := exec.LookPath("xgboost"); err != nil {
		t.Skip("xgboost CLI not installed (apt-get install xgboost)")
	}
	m, err := suite.ReadManifest("testdata/prefill-extrapolation.json")
	if err != nil {
		t.Fatal(err)
	}
	samples, err := m.Traces[0].Samples(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	opts := eval.Options{XGBoost: xgboost.CLI{TempDir: t.TempDir()}, TempDir: t.TempDir()}
	rep, err := eval.Extrapolate(context.Background(), samples, opts, 1024, 2048, 100)
	if err != nil {
		t.Fatal(err)
	}
	h := rep.Find(features.TTFT, eval.ModelHeadroom)
	out := rep.Find(features.TTFT, eval.ModelHeadroomOutOfRange)
	if h == nil || out == nil || h.Rows < 500 || out.Rows < h.Rows*9/10 {
		t.Fatalf("results %+v", rep.Results)
	}
	if out.Bias < -10 || out.Bias > 10 {
		t.Errorf("median bias %+.1f%% on the long prompts, want within ±10%%", out.Bias)
	}
	if out.Coverage == nil || *out.Coverage < 80 {
		t.Errorf("q=0.9 covers %v%% of the long prompts, want at least 80%%", out.Coverage)
	}
	t.Logf("TTFT out of range: %d rows, bias %+.2f%%, coverage %.1f%%, bound %+.1f%%", out.Rows, out.Bias, *out.Coverage, *out.BoundWidth)
}
