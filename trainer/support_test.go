package trainer

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/headroomhq/headroom/model"
)

// convexRows returns rows of fitSchema whose latency grows with the prompt
// faster than a line (an attention term), with log-normal noise of spread
// sd; prompts are log-uniform in [lo, hi].
func convexRows(rng *rand.Rand, n int, lo, hi, sd float64) Dataset {
	var d Dataset
	for range n {
		p := math.Round(lo * math.Pow(hi/lo, rng.Float64()))
		x := []float64{float64(rng.IntN(30)), p}
		y := (10 + x[0] + p/20 + p*p/400_000) * math.Exp(sd*rng.NormFloat64())
		d.X, d.Y = append(d.X, x), append(d.Y, y)
	}
	return d
}

// coverageOf is the share of rows at or below m's q quantile, in percent.
func coverageOf(m *model.TargetModel, d Dataset, q float64) float64 {
	hit := 0
	for i, x := range d.X {
		if d.Y[i] <= m.Quantile(x, m.Predict(x), q) {
			hit++
		}
	}
	return 100 * float64(hit) / float64(len(d.Y))
}

// The case: trained on prompts of at most 1,024 tokens, asked about
// prompts of 2,048-4,096. The line under-predicts the convex cost out there
// by more than the in-range spread, so bounds calibrated in range miss
// most long prompts; the measured widening covers them, and leaves every
// in-range bound as it was. Removing the widening fails this test.
func TestBoundsWidenForExtrapolatedRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 14))
	train := convexRows(rng, 3000, 16, 1024, 0.04)
	inRange := convexRows(rng, 2000, 16, 1024, 0.04)
	outOfRange := convexRows(rng, 2000, 2048, 4096, 0.04)

	fit := func(folds int) *model.TargetModel {
		cfg := DefaultFitConfig()
		cfg.Support.Folds, cfg.Support.FirstFolds = folds, folds
		m, err := Fit(context.Background(), fitSchema, train, Dataset{}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	plain, widened := fit(0), fit(2)
	if plain.Support != nil {
		t.Fatalf("widening off, yet support %+v", plain.Support)
	}
	if widened.Support == nil || widened.Support.SpreadUp[1] <= 0 {
		t.Fatalf("support %+v: no spread measured along the prompt", widened.Support)
	}
	t.Logf("support %+v", widened.Support)

	var bias []float64
	for i, x := range outOfRange.X {
		bias = append(bias, widened.Predict(x)/outOfRange.Y[i]-1)
	}
	if b := medianOf(bias); math.Abs(b) > 0.10 {
		t.Fatalf("median bias %+.1f%% out of range: the case needs a central prediction within ±10%%", 100*b)
	}
	before, after := coverageOf(plain, outOfRange, 0.9), coverageOf(widened, outOfRange, 0.9)
	t.Logf("q=0.9 coverage out of range: %.1f%% calibrated in range, %.1f%% widened", before, after)
	if before >= 70 {
		t.Errorf("calibration alone covers %.1f%% out of range: the case shows nothing", before)
	}
	if after < 80 {
		t.Errorf("widened q=0.9 covers %.1f%% of the extrapolated rows, want at least 80%%", after)
	}
	// Rows drawn from the training distribution, less the few beyond its
	// sampled extremes.
	var inside Dataset
	for i, x := range inRange.X {
		if widened.OutOfRange(x) == 0 {
			inside.X, inside.Y = append(inside.X, x), append(inside.Y, inRange.Y[i])
		}
	}
	inRange = inside
	for i, x := range inRange.X {
		if widened.Reach(x) != (model.Reach{}) {
			t.Fatalf("row %v inside the training ranges reaches %+v", x, widened.Reach(x))
		}
		c := widened.Predict(x)
		for _, q := range []float64{0.05, 0.5, 0.9, 0.95} {
			if a, b := widened.Quantile(x, c, q), plain.Quantile(x, c, q); a != b {
				t.Fatalf("in-range row %d: q=%v bound %v with widening, %v without", i, q, a, b)
			}
		}
	}
	if got := coverageOf(widened, inRange, 0.9); math.Abs(got-90) > 3 {
		t.Errorf("in range q=0.9 covers %.1f%%, want 90 ± 3", got)
	}
}

// A retrain measures only Folds columns and carries the rest from the
// model in service, so a full store does not pay for every column every
// time; the columns it measures are the ones never measured, then the
// stalest.
func TestSupportCarriesMeasuredColumnsOver(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	train := convexRows(rng, 2000, 16, 1024, 0.05)
	cfg := DefaultFitConfig()
	cfg.Support.Folds, cfg.Support.FirstFolds, cfg.Support.Every, cfg.Support.MinInterval = 1, 1, 1, 0
	first, err := Fit(context.Background(), fitSchema, train, Dataset{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if first.Support == nil || len(first.Support.Folds) != 1 {
		t.Fatalf("first model measured %+v, want one column", first.Support)
	}
	measured := first.Support.Folds[0]

	// Pretend the model in service found a large spread along that
	// column: the next fit must carry it while measuring the other one.
	prev := *first
	s := *first.Support
	s.SpreadUp = append([]float64(nil), s.SpreadUp...)
	j := columnIndex(prev.Columns, measured)
	s.SpreadUp[j] = 1.5
	prev.Support = &s
	cfg.Support.Previous = &prev
	second, err := Fit(context.Background(), fitSchema, train, Dataset{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := second.Support.Folds; len(got) != 2 || got[0] != measured {
		t.Fatalf("second model's measured columns %v, want %s carried then the other", got, measured)
	}
	if second.Support.SpreadUp[j] != 1.5 {
		t.Errorf("carried spread %v, want the model in service's 1.5", second.Support.SpreadUp[j])
	}

	// The third fit re-measures the stalest column, the carried one.
	cfg.Support.Previous = second
	third, err := Fit(context.Background(), fitSchema, train, Dataset{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := third.Support.Folds; len(got) != 2 || got[1] != measured {
		t.Fatalf("third model's measured columns %v, want %s re-measured last", got, measured)
	}
	if third.Support.SpreadUp[j] == 1.5 {
		t.Error("the stalest column was carried again instead of re-measured")
	}

	// A first model's trees carry what its line measured, measuring
	// nothing.
	cfg.Support.Previous, cfg.Support.CarryOnly = &prev, true
	carried, err := Fit(context.Background(), fitSchema, train, Dataset{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := carried.Support; got == nil || len(got.Folds) != 1 || got.Folds[0] != measured || got.SpreadUp[j] != 1.5 || got.Rows != 0 {
		t.Errorf("carry-only support %+v, want the previous model's %s alone", got, measured)
	}

	// Measuring every third fit: two fits carry, aging, the third measures.
	cfg.Support.CarryOnly, cfg.Support.Every, cfg.Support.Previous = false, 3, &prev
	for i, want := range []struct {
		age      int
		measures bool
	}{{1, false}, {2, false}, {0, true}, {1, false}} {
		next, err := Fit(context.Background(), fitSchema, train, Dataset{}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := next.Support; got.Age != want.age || (got.Rows > 0) != want.measures {
			t.Errorf("fit %d: age %d, measured %d rows; want age %d, measuring %v", i, got.Age, got.Rows, want.age, want.measures)
		}
		cfg.Support.Previous = next
	}

	// And at most once a MinInterval: a spread measured just now is
	// carried.
	cfg.Support.Every, cfg.Support.MinInterval = 1, time.Hour
	fresh := *second.Support
	fresh.MeasuredAt = time.Now()
	recent := *second
	recent.Support = &fresh
	cfg.Support.Previous = &recent
	next, err := Fit(context.Background(), fitSchema, train, Dataset{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if next.Support.Rows != 0 || !next.Support.MeasuredAt.Equal(fresh.MeasuredAt) {
		t.Errorf("measured %d rows at %v within the interval of %v", next.Support.Rows, next.Support.MeasuredAt, fresh.MeasuredAt)
	}
	fresh.MeasuredAt = time.Now().Add(-2 * time.Hour)
	if next, err = Fit(context.Background(), fitSchema, train, Dataset{}, cfg); err != nil {
		t.Fatal(err)
	}
	if next.Support.Rows == 0 {
		t.Error("a spread measured two hours ago was carried, want measured again")
	}
}

func TestSpreadForJudgesEveryBandOfDistance(t *testing.T) {
	var needs []need
	// 500 rows near the cut, nearly all covered in range; 60 far rows of
	// which a third need a spread of 0.3.
	for i := range 500 {
		up := 0.0
		if i < 40 {
			up = 5 // missed by noise just past the cut
		}
		needs = append(needs, need{d: 0.2, up: up})
	}
	for i := range 60 {
		up := 0.0
		if i < 20 {
			up = 0.3
		}
		needs = append(needs, need{d: 3, up: up})
	}
	up, _ := spreadFor(needs, 0.9, minBandRows)
	if up != 0.3 {
		t.Errorf("spread %v, want 0.3: the far band needs it, though 90%% of all rows are covered without", up)
	}
	few := needs[:500+minBandRows-1-40]
	if up, _ := spreadFor(few, 0.9, minBandRows); up != 0 {
		t.Errorf("spread %v from a far band of fewer than %d rows", up, minBandRows)
	}
}
