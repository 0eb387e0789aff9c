package predictor

import (
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/wire"
)

// linearModel predicts base + perRunning·num_request_running, with log
// residuals spread evenly over ±spread for calibration.
func linearModel(t testing.TB, cols []string, base, perRunning, spread float64) *model.TargetModel {
	t.Helper()
	s := features.MustSchema(cols...)
	n := s.Len()
	lin := &model.Linear{Intercept: base, Coef: make([]float64, n), Mean: make([]float64, n), Scale: make([]float64, n)}
	for i := range lin.Scale {
		lin.Scale[i] = 1
	}
	lin.Coef[s.Index("num_request_running")] = perRunning
	res := make([]float64, 1001)
	for i := range res {
		res[i] = spread * (float64(i)/500 - 1)
	}
	cal, err := model.NewCalibration("holdout", res)
	if err != nil {
		t.Fatal(err)
	}
	m := &model.TargetModel{Kind: model.KindLinear, Columns: cols, Linear: lin, BaseFloorMs: 1, MinMs: 0.1,
		MaxMs: 1e6, Ranges: make([]model.Range, n), Calibration: cal}
	if err := m.Prepare(); err != nil {
		t.Fatal(err)
	}
	return m
}

func testPublished(t testing.TB, version uint64, ttftBase float64) *bundle.Published {
	t.Helper()
	b := &model.Bundle{Version: version, CreatedAt: time.Now().UTC(),
		TTFT: linearModel(t, features.DefaultTTFTColumns, ttftBase, 10, 0.2),
		TPOT: linearModel(t, features.DefaultTPOTColumns, 15, 0.5, 0.1)}
	data, err := bundle.Encode(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle.Published{Bundle: b, Encoded: data}
}

// lineagePublished is testPublished in lineage epoch ("" for a bundle of a
// trainer without epochs).
func lineagePublished(t testing.TB, epoch string, version uint64, ttftBase float64) *bundle.Published {
	t.Helper()
	b := testPublished(t, version, ttftBase).Bundle
	b.Epoch = epoch
	data, err := bundle.Encode(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle.Published{Bundle: b, Encoded: data}
}

func TestPredictNotReady(t *testing.T) {
	p, _ := New(Mean, 0.9)
	if p.Ready() {
		t.Fatal("ready without a bundle")
	}
	if _, err := p.Predict([]features.Row{{}}, make([]wire.Prediction, 1)); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Predict without a bundle: %v, want ErrNotReady", err)
	}
}

func TestPredictMeanQuantileAndBounds(t *testing.T) {
	rows := []features.Row{{NumRequestRunning: 1}, {NumRequestRunning: 5}}
	mean, _ := New(Mean, 0.9)
	quant, _ := New(Quantile, 0.9)
	pub := testPublished(t, 1, 100)
	mean.Swap(pub, time.Now())
	quant.Swap(pub, time.Now())
	pm, pq := make([]wire.Prediction, 2), make([]wire.Prediction, 2)
	if _, err := mean.Predict(rows, pm); err != nil {
		t.Fatal(err)
	}
	if _, err := quant.Predict(rows, pq); err != nil {
		t.Fatal(err)
	}
	// In order: row i's prediction is row i's.
	if pm[0].TTFTMs != 110 || pm[1].TTFTMs != 150 || math.Abs(pm[1].TPOTMs-17.5) > 1e-9 {
		t.Fatalf("mean predictions %+v", pm)
	}
	// The 90% quantile sits at the calibration's 90% log residual above the
	// centre, about exp(0.8·0.2).
	want := 110 * math.Exp(pub.Bundle.TTFT.Calibration.LogResidual(0.9))
	if math.Abs(want-110*math.Exp(0.16)) > 0.5 || math.Abs(pq[0].TTFTMs-want) > 1e-6 {
		t.Errorf("q90 TTFT %v, want %v", pq[0].TTFTMs, want)
	}
	for _, p := range pm {
		if !(p.TTFTBounds[0] < p.TTFTMs && p.TTFTMs < p.TTFTBounds[1]) || !(p.TTFTUncertainty > 0) {
			t.Errorf("bounds %v and uncertainty %v do not bracket %v", p.TTFTBounds, p.TTFTUncertainty, p.TTFTMs)
		}
	}
}

func TestNewValidates(t *testing.T) {
	for _, q := range []float64{0, 1, -0.5, math.NaN()} {
		if _, err := New(Quantile, q); err == nil {
			t.Errorf("quantile %v accepted", q)
		}
	}
	if _, err := New("median", 0.5); err == nil {
		t.Error("objective median accepted")
	}
}

func TestSwapOnlyForwards(t *testing.T) {
	p, _ := New(Mean, 0.9)
	v2, v1 := testPublished(t, 2, 100), testPublished(t, 1, 200)
	if !p.Swap(v2, time.Now()) {
		t.Fatal("first swap refused")
	}
	if p.Swap(v1, time.Now()) {
		t.Error("swapped to an older version")
	}
	if p.Swap(v2, time.Now()) {
		t.Error("swapped to the same bundle again")
	}
}

// A bundle of another lineage goes into service whatever its version; an
// older version of the lineage in service still does not.
func TestSwapFollowsANewLineage(t *testing.T) {
	p, _ := New(Mean, 0.9)
	for _, step := range []struct {
		pub  *bundle.Published
		want bool
	}{
		{lineagePublished(t, "", 57, 100), true},  // a trainer of a release without epochs
		{lineagePublished(t, "A", 58, 110), true}, // the same trainer upgraded
		{lineagePublished(t, "B", 1, 120), true},  // its bundles wiped
		{lineagePublished(t, "A", 59, 130), true}, // another trainer behind the same address
		{lineagePublished(t, "A", 58, 140), false},
		{lineagePublished(t, "A", 60, 150), true},
	} {
		b := step.pub.Bundle
		if got := p.Swap(step.pub, time.Now()); got != step.want {
			t.Errorf("swap to epoch %q version %d: %v, want %v", b.Epoch, b.Version, got, step.want)
		}
	}
	if cur, _ := p.Current(); cur.Bundle.Epoch != "A" || cur.Bundle.Version != 60 {
		t.Errorf("serving epoch %q version %d, want A 60", cur.Bundle.Epoch, cur.Bundle.Version)
	}
}

// A swap during a storm of predictions never yields a mixed or failed answer.
func TestSwapUnderLoad(t *testing.T) {
	p, _ := New(Mean, 0.9)
	p.Swap(testPublished(t, 1, 100), time.Now())
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan string, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows := []features.Row{{NumRequestRunning: 0}}
			out := make([]wire.Prediction, 1)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := p.Predict(rows, out); err != nil {
					errs <- err.Error()
					return
				}
				if ttft := out[0].TTFTMs; ttft < 100 || ttft >= 100+50 {
					errs <- "prediction from no known bundle"
					return
				}
			}
		}()
	}
	for v := uint64(2); v < 50; v++ {
		p.Swap(testPublished(t, v, 100+float64(v)), time.Now())
	}
	close(stop)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func BenchmarkPredict10Rows(b *testing.B) {
	p, _ := New(Mean, 0.9)
	p.Swap(testPublished(b, 1, 100), time.Now())
	rows := make([]features.Row, 10)
	out := make([]wire.Prediction, 10)
	b.ReportAllocs()
	for b.Loop() {
		p.Predict(rows, out)
	}
}

// A batch large enough to be split over goroutines gets exactly the
// predictions its rows get one at a time, in order.
func TestPredictLargeBatchMatchesRowByRow(t *testing.T) {
	p, _ := New(Quantile, 0.9)
	p.Swap(&bundle.Published{Bundle: &model.Bundle{Version: 1, CreatedAt: time.Now(),
		TTFT: treeModel(t, features.TTFT, 16, 4), TPOT: treeModel(t, features.TPOT, 16, 4)}}, time.Now())
	for _, n := range []int{2*parallelRows - 1, 2 * parallelRows, 5*parallelRows + 3} {
		rows := benchRows(n)
		got := make([]wire.Prediction, n)
		if _, err := p.Predict(rows, got); err != nil {
			t.Fatal(err)
		}
		one := make([]wire.Prediction, 1)
		for i := range rows {
			if _, err := p.Predict(rows[i:i+1], one); err != nil {
				t.Fatal(err)
			}
			if got[i] != one[0] {
				t.Fatalf("%d rows: row %d predicted %+v in the batch, %+v alone", n, i, got[i], one[0])
			}
		}
	}
}

// Every prediction path serves bounds widened by a row's distance outside
// the training ranges: the quantile objective and the 5%/95% bounds move,
// the mean does not, and a row inside the ranges is served as calibrated.
func TestPredictWidensOutOfRange(t *testing.T) {
	pub := testPublished(t, 1, 100)
	m := pub.Bundle.TTFT
	n := len(m.Columns)
	run := m.Schema().Index("num_request_running")
	m.Ranges = make([]model.Range, n)
	m.Ranges[run] = model.Range{Min: 0, Max: 10}
	m.Support = &model.Support{SpreadUp: make([]float64, n), SpreadDown: make([]float64, n)}
	m.Support.SpreadUp[run], m.Support.SpreadDown[run] = 0.3, 0.1
	if err := m.Prepare(); err != nil {
		t.Fatal(err)
	}
	rows := []features.Row{{NumRequestRunning: 5}, {NumRequestRunning: 20}} // in range; one span out
	mean, _ := New(Mean, 0.9)
	quant, _ := New(Quantile, 0.9)
	mean.Swap(pub, time.Now())
	quant.Swap(pub, time.Now())
	pm, pq := make([]wire.Prediction, 2), make([]wire.Prediction, 2)
	if _, err := mean.Predict(rows, pm); err != nil {
		t.Fatal(err)
	}
	if _, err := quant.Predict(rows, pq); err != nil {
		t.Fatal(err)
	}
	c := m.Calibration
	med := c.LogResidual(0.5)
	for i, reach := range []model.Reach{{}, {Up: 0.3, Down: 0.1}} {
		central := pm[i].TTFTMs
		if want := 100 + 10*float64(rows[i].NumRequestRunning); central != want {
			t.Fatalf("row %d mean %v, want %v: widening moved the centre", i, central, want)
		}
		up := func(q float64) float64 {
			return central * math.Exp(med+math.Hypot(c.LogResidual(q)-med, model.NormalQuantile(q)*reach.Up))
		}
		down := func(q float64) float64 {
			return central * math.Exp(med-math.Hypot(med-c.LogResidual(q), model.NormalQuantile(1-q)*reach.Down))
		}
		if got, want := pq[i].TTFTMs, up(0.9); math.Abs(got-want) > 1e-9*want {
			t.Errorf("row %d q90 %v, want %v", i, got, want)
		}
		if got, want := pm[i].TTFTBounds, [2]float64{down(0.05), up(0.95)}; math.Abs(got[0]-want[0]) > 1e-9*want[0] || math.Abs(got[1]-want[1]) > 1e-9*want[1] {
			t.Errorf("row %d bounds %v, want %v", i, got, want)
		}
	}
	if !(pm[1].TTFTUncertainty > pm[0].TTFTUncertainty*1.5) {
		t.Errorf("uncertainty %v out of range against %v in range; want clearly larger", pm[1].TTFTUncertainty, pm[0].TTFTUncertainty)
	}
}
