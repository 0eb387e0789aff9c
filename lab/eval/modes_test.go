package eval

import (
	"bytes"
	"context"
	"os/exec"
	"reflect"
	"testing"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/xgboost"
)

// testOptions are the service defaults with the xgboost CLI, which these
// tests need.
func testOptions(t *testing.T) Options {
	t.Helper()
	if testing.Short() {
		t.Skip("trains xgboost models over and over; skipped with -short")
	}
	if _, err := exec.LookPath("xgboost"); err != nil {
		t.Skip("xgboost CLI not installed (apt-get install xgboost)")
	}
	return Options{XGBoost: xgboost.CLI{TempDir: t.TempDir()}, TempDir: t.TempDir()}
}

// The extrapolation case: trained on prompts of at most 1,024
// tokens, tested on prompts beyond 2,048, on a server whose prefill grows
// linearly plus a quadratic attention term. Trees alone repeat their last
// leaf and under-predict heavily; Headroom's line carries the trend.
func TestExtrapolateBeyondTrainedPromptLengths(t *testing.T) {
	opts := testOptions(t)
	rep, err := Extrapolate(context.Background(), Synthetic(SyntheticOptions{Rows: 2500, Seed: 7}), opts, 1024, 2048, 0)
	if err != nil {
		t.Fatal(err)
	}
	h, x := rep.Find(features.TTFT, ModelHeadroom), rep.Find(features.TTFT, ModelXGBoost)
	if h == nil || x == nil || h.Rows < 300 || h.Rows != x.Rows {
		t.Fatalf("results %+v", rep.Results)
	}
	if h.Bias < -10 || h.Bias > 10 {
		t.Errorf("headroom median signed error %+.1f%% beyond the trained range, want within ±10%%", h.Bias)
	}
	if x.Bias > -30 {
		t.Errorf("xgboost alone median signed error %+.1f%%; want the heavy under-prediction trees show", x.Bias)
	}
	if tp := rep.Find(features.TPOT, ModelHeadroom); tp == nil || tp.Bias < -10 || tp.Bias > 10 {
		t.Errorf("tpot headroom %+v, want bias within ±10%%", tp)
	}
	if _, err := Extrapolate(context.Background(), Synthetic(SyntheticOptions{Rows: 100}), opts, 2048, 1024, 0); err == nil {
		t.Error("accepted a test range inside the training range")
	}
}

// Split mode is deterministic, reports every model on both targets on the
// same rows, and Headroom's quantile means what it says on held-out rows.
func TestSplitDeterministicAndComplete(t *testing.T) {
	opts := testOptions(t)
	samples := Synthetic(SyntheticOptions{Rows: 1200, Seed: 2, MaxTokens: 2048})
	a, err := Split(context.Background(), samples, opts, 2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Split(context.Background(), samples, opts, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a.Results, b.Results) {
		t.Errorf("two runs differ:\n%+v\n%+v", a.Results, b.Results)
	}
	if a.Scheme != store.DefaultSchemeName || a.Seeds != 2 || a.Retrains != 2 {
		t.Errorf("report settings %+v", a)
	}
	// Each seed's trainer chose every target's configuration once.
	for _, tg := range features.PodTargets {
		n := 0
		for name, c := range a.Chosen[tg.String()] {
			if name == "-" {
				t.Errorf("%s: a model without a choice from 1,080 rows", tg)
			}
			n += c
		}
		if n != 2 {
			t.Errorf("%s: %d models counted by choice (%v), want 2", tg, n, a.Chosen)
		}
	}
	for _, tg := range features.PodTargets {
		h := a.Find(tg, ModelHeadroom)
		for _, m := range mainModels {
			if m == ModelHeadroomInRange || m == ModelHeadroomOutOfRange {
				// Headroom's rows, split by range.
				in, out := a.Find(tg, ModelHeadroomInRange), a.Find(tg, ModelHeadroomOutOfRange)
				if rowsOf(in)+rowsOf(out) != h.Rows {
					t.Fatalf("%s: in-range %+v and out-of-range %+v rows do not add up to %d", tg, in, out, h.Rows)
				}
				continue
			}
			r := a.Find(tg, m)
			if r == nil || r.Rows != h.Rows || len(r.MAPESeeds) != 2 {
				t.Fatalf("%s %s: %+v", tg, m, r)
			}
			if (m == ModelHeadroom) != (r.Coverage != nil) {
				t.Errorf("%s %s coverage %v; only headroom has quantiles", tg, m, r.Coverage)
			}
		}
		// 8% log-normal noise: a model that learned the server is near it.
		if h.MAPE > 10 {
			t.Errorf("%s headroom MAPE %.1f%% on 8%% noise", tg, h.MAPE)
		}
		if c := *h.Coverage; c < 82 || c > 97 {
			t.Errorf("%s coverage of the 0.9 quantile %.1f%% on held-out rows", tg, c)
		}
	}
	if _, err := Split(context.Background(), samples, opts, 0); err == nil {
		t.Error("accepted 0 seeds")
	}
}

// Prequential mode predicts each row before ingesting it, retraining every
// K rows, and reports early life apart, beside a constant.
func TestPrequentialWalk(t *testing.T) {
	opts := testOptions(t)
	samples := Synthetic(SyntheticOptions{Rows: 600, Seed: 5, MaxTokens: 2048})
	rep, err := Prequential(context.Background(), samples, opts, 150)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Retrains != 3 || rep.Every != 150 {
		t.Errorf("%d retrains every %d rows, want 3 every 150", rep.Retrains, rep.Every)
	}
	for _, tg := range features.PodTargets {
		// Every row carries both labels; the first block has no model.
		if h := rep.Find(tg, ModelHeadroom); h == nil || h.Rows != 450 || h.Coverage == nil {
			t.Errorf("%s headroom %+v, want 450 rows scored with coverage", tg, h)
		}
		h, c := rep.FindEarly(tg, ModelHeadroom), rep.FindEarly(tg, ModelConstant)
		if h == nil || c == nil || h.Rows == 0 || h.Rows != c.Rows {
			t.Fatalf("%s early life: %+v vs %+v", tg, h, c)
		}
		if h.MAPE >= c.MAPE {
			t.Errorf("%s early life: headroom MAPE %.1f%%, constant %.1f%%; a dozen samples must already beat it", tg, h.MAPE, c.MAPE)
		}
	}
	if len(rep.EarlyStarts) != earlyLives {
		t.Errorf("early starts %v", rep.EarlyStarts)
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, rep); err != nil || !bytes.Contains(buf.Bytes(), []byte("early life")) {
		t.Errorf("table: %v\n%s", err, buf.String())
	}
	if _, err := Prequential(context.Background(), samples, opts, 0); err == nil {
		t.Error("accepted every 0")
	}
}

func TestSplitRows(t *testing.T) {
	samples := Synthetic(SyntheticOptions{Rows: 1000})
	train, test := splitRows(samples, 1)
	if len(test) != 100 || len(train) != 900 {
		t.Fatalf("split %d/%d, want 900/100", len(train), len(test))
	}
	_, test2 := splitRows(samples, 2)
	if reflect.DeepEqual(test, test2) {
		t.Error("seeds 1 and 2 hold out the same rows")
	}
	// Both parts keep trace order.
	for i := 1; i < len(train); i++ {
		if !train[i-1].Timestamp.Before(train[i].Timestamp) {
			t.Fatalf("train rows out of order at %d", i)
		}
	}
}

func TestEarlyStarts(t *testing.T) {
	if got := earlyStarts(100); !reflect.DeepEqual(got, []int{0}) {
		t.Errorf("short trace: %v", got)
	}
	got := earlyStarts(3400)
	if len(got) != earlyLives || got[0] != 0 || got[len(got)-1] != 3400-4*EarlyLifeMax {
		t.Errorf("starts %v", got)
	}
}

func rowsOf(r *Result) int {
	if r == nil {
		return 0
	}
	return r.Rows
}
