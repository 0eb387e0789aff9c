package fit

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/headroomhq/headroom/trainer/fit/fittest"
)

// Where the rows at one place of the columns spread widely about their
// centre, the prediction with the least relative error lies below it: for
// a log-normal spread σ, exp(−σ²) times the geometric mean. The trees on
// the line's residuals put their leaves there (relativeErrorWeights),
// where plain squared error on the log residuals put them at the geometric
// mean, and leave rows that agree at their centre.
func TestTreesAimAtRelativeErrorWhereRowsSpread(t *testing.T) {
	x := fittest.XGBoost(t)
	const narrow, wide = 0.2, 0.6
	spread := func(x []float64) float64 {
		if x[0] >= 15 {
			return wide
		}
		return narrow
	}
	rows := func(rng *rand.Rand, n int) Dataset {
		var d Dataset
		for range n {
			x := []float64{float64(rng.IntN(30)), float64(16 + rng.IntN(1000))}
			y := (10 + x[0] + x[1]/20) * math.Exp(spread(x)*rng.NormFloat64())
			d.X, d.Y = append(d.X, x), append(d.Y, y)
		}
		return d
	}
	rng := rand.New(rand.NewPCG(25, 25))
	cfg := DefaultOptions()
	cfg.XGBoost = x
	m, err := Model(context.Background(), fitSchema, rows(rng, 2000), Dataset{}, cfg, serviceInputs)
	if err != nil {
		t.Fatal(err)
	}
	// The median of prediction / centre in each part (the labels' clip,
	// Options.TreeLabelClip, keeps the widest rows' tilt a little short;
	// without the weights, both parts were 0.87, the shift's factor).
	ratios := map[float64][]float64{}
	for _, row := range rows(rng, 4000).X {
		ratios[spread(row)] = append(ratios[spread(row)], m.Predict(row)/(10+row[0]+row[1]/20))
	}
	for _, part := range []struct {
		name   string
		sd     float64
		lo, hi float64
	}{
		{"rows that spread widely", wide, 0.6, 0.82},
		{"rows that agree", narrow, 0.9, 1.02},
	} {
		if got := Median(ratios[part.sd]); got < part.lo || got > part.hi {
			t.Errorf("%s: predicted %.2f times their geometric mean (median), want %.2f-%.2f (relative error's best is %.2f)",
				part.name, got, part.lo, part.hi, math.Exp(-part.sd*part.sd))
		}
	}
	// One factor for all rows (the shift) would leave both parts alike:
	// the spread decides how far below its centre each is predicted.
	if got, best := Median(ratios[wide])/Median(ratios[narrow]), math.Exp(narrow*narrow-wide*wide); got > 0.88 || got < 0.65 {
		t.Errorf("the widely spread rows predicted %.2f times as far below their centre as the others, want 0.65-0.88 (best %.2f)", got, best)
	}
}

// The weights are exp(−label) scaled to a mean of 1, whatever the labels'
// level, and the base score is the labels' mean under them.
func TestRelativeErrorWeights(t *testing.T) {
	for _, shift := range []float64{0, 700, -700} {
		labels := []float64{shift - 1, shift, shift + 1}
		w, base := relativeErrorWeights(labels)
		e := math.E
		want := []float64{3 * e / (e + 1 + 1/e), 3 / (e + 1 + 1/e), 3 / e / (e + 1 + 1/e)}
		for i := range w {
			if math.Abs(w[i]-want[i]) > 1e-12 {
				t.Errorf("labels %v: weights %v, want %v", labels, w, want)
				break
			}
		}
		if wantBase := shift + (-e+1/e)/(e+1+1/e); math.Abs(base-wantBase) > 1e-9 {
			t.Errorf("labels %v: base %v, want %v", labels, base, wantBase)
		}
	}
}
