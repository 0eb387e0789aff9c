package model

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestFeatureDistance(t *testing.T) {
	r := Range{Min: 100, Max: 1100}
	for _, c := range []struct {
		name string
		r    Range
		v    float64
		want float64
	}{
		{"inside", r, 500, 0},
		{"at the max", r, 1100, 0},
		{"one span above", r, 2100, 1},
		{"half a span below", r, -400, 0.5},
		{"capped", r, 1e9, MaxSupportDistance},
		{"NaN is far", r, math.NaN(), MaxSupportDistance},
		{"constant column, same value", Range{Min: 0, Max: 0}, 0, 0},
		{"constant column, another value", Range{Min: 0, Max: 0}, 0.3, 1},
	} {
		if got := FeatureDistance(c.r, c.v); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: FeatureDistance(%v, %v) = %v, want %v", c.name, c.r, c.v, got, c.want)
		}
	}
}

// testCalibration has residual quantiles symmetric about 0.01, with the
// 90% point 0.1 above the median.
func testCalibration(t *testing.T) Calibration {
	t.Helper()
	r := make([]float64, 1001)
	for i := range r {
		// Uniform on [0.01 − 0.125, 0.01 + 0.125]: the 10% and 90%
		// points are 0.1 from the median.
		r[i] = 0.01 + 0.25*(float64(i)/1000-0.5)
	}
	c, err := NewCalibration("test", r)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSupportLogResidual(t *testing.T) {
	c := testCalibration(t)
	s := &Support{SpreadUp: []float64{0.2}, SpreadDown: []float64{0.05}}
	z := NormalQuantile(0.9)
	med := c.LogResidual(0.5)
	for _, tc := range []struct {
		name  string
		s     *Support
		q     float64
		reach Reach
		want  float64
	}{
		{"no support is the calibration", nil, 0.9, Reach{Up: 1, Down: 1}, c.LogResidual(0.9)},
		{"in range is the calibration", s, 0.9, Reach{}, c.LogResidual(0.9)},
		{"the median never moves", s, 0.5, Reach{Up: 3, Down: 3}, med},
		{"upper: variances add", s, 0.9, Reach{Up: 0.3}, med + math.Hypot(c.LogResidual(0.9)-med, z*0.3)},
		{"lower: variances add", s, 0.1, Reach{Down: 0.3}, med - math.Hypot(med-c.LogResidual(0.1), z*0.3)},
		{"upper reach does not move a lower quantile", s, 0.1, Reach{Up: 2}, c.LogResidual(0.1)},
	} {
		if got := tc.s.LogResidual(c, tc.q, tc.reach); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestSupportReachTakesTheFarthestColumn(t *testing.T) {
	ranges := []Range{{0, 1000}, {0, 1000}, {0, 10}}
	s := &Support{SpreadUp: []float64{0.1, 0.1, 0.5}, SpreadDown: []float64{0, 0.02, 0}}
	// The first two columns are 1 and 2 spans out, the third in range.
	r := s.Reach(ranges, []float64{2000, 3000, 5})
	if math.Abs(r.Up-0.2) > 1e-12 || math.Abs(r.Down-0.04) > 1e-12 {
		t.Errorf("reach %+v, want {0.2 0.04}: the largest column's, not a sum", r)
	}
	if r := s.Reach(ranges, []float64{10, 10, 5}); r != (Reach{}) {
		t.Errorf("reach in range %+v, want zero", r)
	}
	if r := (*Support)(nil).Reach(ranges, []float64{1e6, 1e6, 1e6}); r != (Reach{}) {
		t.Errorf("nil support reaches %+v", r)
	}
}

// A column's reach is the rate measured in the row's own band of distance
// times its distance, never less than a nearer band's rate at that band's
// far edge: a large rate measured just past the support does not multiply
// out to far rows, and a farther row is never narrower than a nearer one.
func TestSupportReachByBandOfDistance(t *testing.T) {
	ranges := []Range{{0, 1000}}
	flat := &Support{SpreadUp: []float64{0.4}, SpreadDown: []float64{0.1}}
	banded := &Support{SpreadUp: []float64{0.4}, SpreadDown: []float64{0.1},
		BandUp:   [][]float64{{0.4, 0.05, 0.02, 0.03, 0.01}},
		BandDown: [][]float64{{0, 0, 0.1, 0.1, 0.1}}}
	for _, tc := range []struct {
		name     string
		s        *Support
		d        float64
		up, down float64
	}{
		{"flat, near", flat, 0.25, 0.1, 0.025},
		{"flat, far: the one rate times distance", flat, 3, 1.2, 0.3},
		{"band 0: its own rate", banded, 0.25, 0.1, 0},
		{"band 1: no less than band 0's at its edge", banded, 0.75, 0.2, 0},
		{"band 3: its own rate when that is wider", banded, 3, 0.2, 0.3},
		{"band 4 holds the farthest rows' rate", banded, 8, 0.2, 0.8},
		{"capped distance", banded, 1e9, 0.2, 1},
	} {
		r := tc.s.Reach(ranges, []float64{1000 + 1000*tc.d})
		if math.Abs(r.Up-tc.up) > 1e-12 || math.Abs(r.Down-tc.down) > 1e-12 {
			t.Errorf("%s: reach %+v at %v spans, want {%v %v}", tc.name, r, tc.d, tc.up, tc.down)
		}
	}
	last := Reach{}
	for d := 0.01; d < 12; d += 0.01 {
		r := banded.Reach(ranges, []float64{1000 + 1000*d})
		if r.Up < last.Up || r.Down < last.Down {
			t.Fatalf("reach %+v at %v spans is narrower than %+v nearer", r, d, last)
		}
		last = r
	}
}

// A model's bounds widen for a row outside its training ranges and are
// exactly the calibration's inside them; a bundle written before Support
// existed decodes and serves as before.
func TestQuantileWidensOnlyOutOfRange(t *testing.T) {
	m := linearTargetModel(t)
	m.Calibration = testCalibration(t)
	plain := *m
	plain.Support = nil
	m.Support = &Support{SpreadUp: []float64{0.1}, SpreadDown: []float64{0.1}, Rows: 100, Folds: []string{"input_token_length"}}
	if err := m.Prepare(); err != nil {
		t.Fatal(err)
	}
	in, out := []float64{500}, []float64{4000}
	for _, q := range []float64{0.05, 0.5, 0.9, 0.95} {
		if a, b := m.Quantile(in, 100, q), plain.Quantile(in, 100, q); a != b {
			t.Errorf("q %v in range: %v with support, %v without", q, a, b)
		}
	}
	if hi, base := m.Quantile(out, 100, 0.9), plain.Quantile(out, 100, 0.9); !(hi > base*1.2) {
		t.Errorf("q 0.9 three spans out: %v, calibration alone %v; want clearly wider", hi, base)
	}
	if lo, base := m.Quantile(out, 100, 0.05), plain.Quantile(out, 100, 0.05); !(lo < base*0.9) {
		t.Errorf("q 0.05 three spans out: %v, calibration alone %v; want clearly lower", lo, base)
	}
	if a, b := m.Quantile(out, 100, 0.5), plain.Quantile(out, 100, 0.5); a != b {
		t.Errorf("median out of range %v, want %v unchanged", a, b)
	}

	data, err := json.Marshal(&plain)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "support") {
		t.Fatalf("a model without support writes %s", data)
	}
	var old TargetModel
	if err := json.Unmarshal(data, &old); err != nil {
		t.Fatal(err)
	}
	if err := old.Prepare(); err != nil {
		t.Fatal(err)
	}
	if a, b := old.Quantile(out, 100, 0.9), plain.Quantile(out, 100, 0.9); a != b {
		t.Errorf("bundle without support: %v, want %v", a, b)
	}
}

func TestSupportValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    *Support
		ok   bool
	}{
		{"nil", nil, true},
		{"good", &Support{SpreadUp: []float64{0.1}, SpreadDown: []float64{0}}, true},
		{"wrong length", &Support{SpreadUp: []float64{0.1, 0.1}, SpreadDown: []float64{0}}, false},
		{"negative", &Support{SpreadUp: []float64{-0.1}, SpreadDown: []float64{0}}, false},
		{"NaN", &Support{SpreadUp: []float64{math.NaN()}, SpreadDown: []float64{0}}, false},
		{"absurd", &Support{SpreadUp: []float64{MaxSupportSpread + 1}, SpreadDown: []float64{0}}, false},
		{"bands", &Support{SpreadUp: []float64{0.1}, SpreadDown: []float64{0},
			BandUp: [][]float64{{0.1, 0, 0, 0, 0}}, BandDown: [][]float64{{0, 0, 0, 0, 0}}}, true},
		{"bands for another column count", &Support{SpreadUp: []float64{0.1}, SpreadDown: []float64{0},
			BandUp: [][]float64{{0.1, 0, 0, 0, 0}, {0, 0, 0, 0, 0}}}, false},
		{"too few bands", &Support{SpreadUp: []float64{0.1}, SpreadDown: []float64{0},
			BandUp: [][]float64{{0.1, 0}}}, false},
		{"band spread NaN", &Support{SpreadUp: []float64{0.1}, SpreadDown: []float64{0},
			BandDown: [][]float64{{0.1, 0, math.NaN(), 0, 0}}}, false},
	} {
		if err := tc.s.Validate(1); (err == nil) != tc.ok {
			t.Errorf("%s: Validate = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func linearTargetModel(t *testing.T) *TargetModel {
	t.Helper()
	m := &TargetModel{
		Kind:        KindLinear,
		Columns:     []string{"input_token_length"},
		Linear:      &Linear{Intercept: 100, Coef: []float64{0}, Mean: []float64{0}, Scale: []float64{1}},
		BaseFloorMs: 1, MinMs: 0.1, MaxMs: 1e6,
		Ranges: []Range{{Min: 0, Max: 1000}},
	}
	if err := m.Prepare(); err != nil {
		t.Fatal(err)
	}
	return m
}
