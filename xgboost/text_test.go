package xgboost

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// TestReadsTextExactly checks what XGBoost's text parser reads, with
// models that split column j at its value v and at the next float32 above v:
// a row reading v exactly predicts 0, one that reads it low or high predicts
// 2^(j mod 24). Each row fills one block of 24 columns and leaves the rest
// missing, which the stumps send to a 0 leaf, so one CLI run checks many
// values. For each value it writes exactDecimal's text and the shortest
// decimals strconv writes, and requires dmlcStrtof to predict the CLI's
// reading of every one of them, and exactDecimal's to be exact.
func TestReadsTextExactly(t *testing.T) {
	x := requireCLI(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	const (
		bits   = 24 // a float32 sum of distinct powers of two below 2^24 is exact
		blocks = 16
		width  = bits * blocks
	)
	formats := []struct {
		name   string
		format func(float32) string
	}{
		{"exactDecimal", func(v float32) string { s, _ := exactDecimal(v); return s }},
		{"shortest-g", func(v float32) string { return strconv.FormatFloat(float64(v), 'g', -1, 32) }},
		{"shortest-e", func(v float32) string { return strconv.FormatFloat(float64(v), 'e', -1, 32) }},
		{"shortest-f", func(v float32) string { return strconv.FormatFloat(float64(v), 'f', -1, 32) }},
	}
	misread := make([]int, len(formats))
	total := 0
	for run := range 3 {
		vals := make([]float32, width)
		for j := range vals {
			// Magnitudes from 1e-30 to 1e30, integers, and both signs.
			v := math.Pow(10, -30+60*rng.Float64())
			if j%4 == 0 {
				v = float64(rng.IntN(100000))
			} else if j%4 == 1 {
				v = rng.Float64() * math.Pow(10, float64(rng.IntN(8)))
			}
			if rng.IntN(5) == 0 {
				v = -v
			}
			vals[j] = float32(v)
		}
		if run == 0 {
			// Values whose shortest decimals XGBoost misreads.
			copy(vals, []float32{1.67, 1.84, 3.39, 1330937.8, 4.6888983e-04, 1e20, 1e-30})
		}
		var trees []string
		for j, v := range vals {
			bit := float32(int(1) << (j % bits))
			trees = append(trees,
				stumpTree(2*j, j, v, bit, 0, false, width),
				stumpTree(2*j+1, j, math.Nextafter32(v, float32(math.Inf(1))), 0, bit, true, width))
		}
		var csv strings.Builder
		for _, f := range formats {
			for b := range blocks {
				csv.WriteString("0")
				for j, v := range vals {
					s := "nan"
					if j/bits == b {
						s = f.format(v)
					}
					csv.WriteString("," + s)
				}
				csv.WriteString("\n")
			}
		}
		preds, err := x.predictCSV(ctx, xgbModelJSON(0, width, trees), csv.String(), len(formats)*blocks)
		if err != nil {
			t.Fatal(err)
		}
		for i, f := range formats {
			for j, v := range vals {
				mask := int(preds[i*blocks+j/bits])
				s := f.format(v)
				cliExact := mask&(1<<(j%bits)) == 0
				simExact := dmlcStrtof(s) == v
				if cliExact != simExact {
					t.Errorf("%q for %v: xgboost reads it exactly: %v; dmlcStrtof reads %v", s, v, cliExact, dmlcStrtof(s))
				}
				if !cliExact {
					misread[i]++
				}
			}
		}
		total += width
	}
	for i, f := range formats {
		t.Logf("%s: %d of %d values misread", f.name, misread[i], total)
	}
	if misread[0] != 0 {
		t.Errorf("exactDecimal text misread for %d values", misread[0])
	}
	if misread[1] == 0 {
		t.Errorf("no shortest decimal misread: the parser model is untested against a misreading")
	}
}

func TestExactDecimal(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, r := range []struct{ lo, hi float64 }{
		{1e-35, 1e-20}, {1e-20, 1e-6}, {1e-6, 1}, {1, 1e4}, {1e4, 1e9}, {1e9, 1e20}, {1e20, math.MaxFloat32},
	} {
		for range 20000 {
			v := float32(math.Exp(math.Log(r.lo) + rng.Float64()*(math.Log(r.hi)-math.Log(r.lo))))
			if rng.IntN(2) == 0 {
				v = -v
			}
			s, exact := exactDecimal(v)
			if !exact || dmlcStrtof(s) != v {
				t.Fatalf("exactDecimal(%v) = %q, exact %v, read as %v", v, s, exact, dmlcStrtof(s))
			}
		}
	}
	for _, tc := range []struct {
		v     float32
		want  string
		exact bool
	}{
		{0, "0", true},
		{-2.5, "-2.5", true},
		{0.1, "0.1", true},
		{16777216, "16777216", true},
		// The parser computes 1 + float32(0.67) and rounds up to 1.6700001:
		// more digits steer it.
		{1.67, "1.66999996", true},
		{1e-30, "1e-30", true},
		{1e20, "1000000000000000000e+2", true},
		{float32(math.NaN()), "nan", true},
		{float32(math.Inf(-1)), "-inf", true},
		{math.SmallestNonzeroFloat32, "1e-45", false},
	} {
		s, exact := exactDecimal(tc.v)
		if s != tc.want || exact != tc.exact {
			t.Errorf("exactDecimal(%v) = %q, %v; want %q, %v", tc.v, s, exact, tc.want, tc.exact)
		}
		if exact && tc.v == tc.v && dmlcStrtof(s) != tc.v {
			t.Errorf("exactDecimal(%v) = %q, read as %v", tc.v, s, dmlcStrtof(s))
		}
	}
}
