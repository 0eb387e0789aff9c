package eval

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/trainer"
)

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

func TestScratchRun(t *testing.T) {
	if os.Getenv("SCRATCH") == "" {
		t.Skip()
	}
	samples, _ := ReadTraceFile("/work/shared/data/traces/sharegpt-h200.jsonl")
	cfg := trainer.DefaultFitConfig()
	if os.Getenv("NOFWD") != "" {
		cfg.MinForwardRows = 1 << 30
	}
	if os.Getenv("LINEAR") != "" {
		cfg.Kind = model.KindLinear
	}
	o := Options{Fit: cfg, Store: store.Options{Scheme: store.MustParseScheme(envOr("SCHEME", "kv10,prefix4,prompt"))}}
	modes := envOr("MODES", "split,prequential")
	if strings.Contains(modes, "split") {
		rep, err := Split(context.Background(), samples, o, 5)
		if err != nil {
			t.Fatal(err)
		}
		WriteTable(os.Stdout, rep)
	}
	if strings.Contains(modes, "prequential") {
		rep, err := Prequential(context.Background(), samples, o, 100)
		if err != nil {
			t.Fatal(err)
		}
		WriteTable(os.Stdout, rep)
	}
	_ = features.TTFT
	_ = fmt.Sprint
}

func TestScratchLine(t *testing.T) {
	if os.Getenv("SCRATCH") == "" {
		t.Skip()
	}
	samples, _ := ReadTraceFile("/work/shared/data/traces/sharegpt-h200.jsonl")
	train, test := splitRows(samples, 1)
	schema := features.DefaultSchema(features.TTFT)
	fmt.Println(schema.Names())
	dtr := trainer.BuildDataset(schema, features.TTFT, train)
	dte := trainer.BuildDataset(schema, features.TTFT, test)
	w := make([]float64, len(dtr.Y))
	for i, y := range dtr.Y {
		w[i] = 1 / (y * y)
	}
	for _, signs := range []bool{false, true} {
		lc := trainer.DefaultFitConfig().Line
		if signs {
			lc.Signs = schema.Directions()
		}
		lin, lam, err := trainer.FitLine(dtr.X, dtr.Y, w, lc, 1)
		if err != nil {
			t.Fatal(err)
		}
		var s float64
		for i, x := range dte.X {
			s += abs(lin.Predict(x)-dte.Y[i]) / dte.Y[i]
		}
		_, coef := lin.OriginalUnits()
		fmt.Printf("signs %v lambda %g test MAPE %.2f coef %.4f\n", signs, lam, 100*s/float64(len(dte.Y)), coef)
	}
}

func TestScratchEarly2(t *testing.T) {
	if os.Getenv("SCRATCH") == "" {
		t.Skip()
	}
	samples, _ := ReadTraceFile("/work/shared/data/traces/sharegpt-h200.jsonl")
	opts := Options{Fit: trainer.DefaultFitConfig(), Store: store.Options{Scheme: store.MustParseScheme("kv10,prefix4,prompt")}}.withDefaults()
	if os.Getenv("MINS") != "" {
		opts.MinSamples = 10
	}
	tot := newTally(ModelHeadroom, ModelXGBoost, ModelLinear, ModelConstant)
	defer func() {
		for _, r := range tot.results() {
			fmt.Printf("TOTAL %s/%s %.2f (%d) cov %v\n", r.Target, r.Model, r.MAPE, r.Rows, r.Coverage)
		}
	}()
	for _, from := range earlyStarts(len(samples)) {
		part := samples[from:]
		early := tot
		isEarly := func(_ features.Target, m *model.TargetModel) bool { return m.TrainSamples < EarlyLifeMax }
		grown := func(r *replica) bool {
			for _, t := range features.Targets {
				if m := r.modelFor(t); m == nil || m.TrainSamples < EarlyLifeMax {
					return false
				}
			}
			return true
		}
		walk(context.Background(), opts, part, earlyEvery, early, isEarly, grown)
		var b strings.Builder
		for _, r := range early.results() {
			fmt.Fprintf(&b, " %s/%s %.2f(%d)", r.Target, r.Model, r.MAPE, r.Rows)
		}
		fmt.Println(from, b.String())
	}
}

func TestScratchEarlyDebug(t *testing.T) {
	if os.Getenv("SCRATCH") == "" {
		t.Skip()
	}
	samples, _ := ReadTraceFile("/work/shared/data/traces/sharegpt-h200.jsonl")
	opts := Options{Fit: trainer.DefaultFitConfig(), Store: store.Options{Scheme: store.MustParseScheme("kv10,prefix4,prompt")}}.withDefaults()
	from := 0
	fmt.Sscan(envOr("FROM", "0"), &from)
	samples = samples[from:]
	r, _ := newReplica(opts)
	defer r.close()
	tg := features.TPOT
	if os.Getenv("TARGET") == "ttft" {
		tg = features.TTFT
	}
	var last *model.TargetModel
	for lo := 0; lo < 300; lo += 10 {
		if lo > 0 {
			r.retrain(context.Background())
		}
		m := r.modelFor(tg)
		if m != nil && m != last {
			last = m
			tr, ho, _ := r.db.Snapshot(tg)
			var ys []float64
			for _, s := range tr {
				y, _ := s.Label(tg)
				ys = append(ys, y)
			}
			fmt.Printf("row %d model on %d (hold %d) labels %.1f shift %.3f const %.2f cal %s %.3f..%.3f\n", lo, m.TrainSamples, len(ho), ys, m.LogShift, r.baselines[tg].constant, m.Calibration.Source, m.Calibration.LogResidual(0.1), m.Calibration.LogResidual(0.9))
			_, coef := m.Linear.OriginalUnits()
			fmt.Printf("  intercept %.2f coef %.4f\n", m.Linear.Intercept, coef)
		}
		block := samples[lo:min(lo+10, len(samples))]
		if m != nil {
			for i := range block {
				y, ok := block[i].Label(tg)
				if !ok {
					continue
				}
				x := m.Schema().Build(&block[i].Row, nil)
				fmt.Printf("   y %.1f pred %.2f lin %.2f run %d kv %.4f\n", y, m.Predict(x), m.PredictLinear(x), block[i].Row.NumRequestRunning, block[i].Row.KVCachePercentage)
			}
		}
		r.add(block)
	}
}

func TestScratchGuard(t *testing.T) {
	if os.Getenv("SCRATCH") == "" {
		t.Skip()
	}
	var samples []store.Sample
	if os.Getenv("SYNTH") != "" {
		samples = Synthetic(SyntheticOptions{Rows: 4000, Seed: 1})
	} else {
		samples, _ = ReadTraceFile("/work/shared/data/traces/sharegpt-h200.jsonl")
	}
	opts := Options{Fit: trainer.DefaultFitConfig()}.withDefaults()
	r, err := newReplica(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	every := 100
	for _, tg := range features.Targets {
		_ = tg
	}
	type acc struct{ h, g, n, oor, hOOR, gOOR float64 }
	var a [2]acc
	for lo := 0; lo < len(samples); lo += every {
		if lo > 0 {
			if err := r.retrain(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		block := samples[lo:min(lo+every, len(samples))]
		for _, tg := range features.Targets {
			m := r.modelFor(tg)
			if m == nil {
				continue
			}
			for i := range block {
				y, ok := block[i].Label(tg)
				if !ok {
					continue
				}
				x := m.Schema().Build(&block[i].Row, nil)
				p := m.Predict(x)
				g := p
				if m.OutOfRange(x) > 0 {
					base, tl := m.Parts(x)
					g = m.Combine(base, tl, 0, m.LogShift)
					a[tg].oor++
					a[tg].hOOR += abs(p-y) / y
					a[tg].gOOR += abs(g-y) / y
				}
				a[tg].h += abs(p-y) / y
				a[tg].g += abs(g-y) / y
				a[tg].n++
			}
		}
		r.add(block)
	}
	for tg, x := range a {
		fmt.Printf("%s rows %.0f headroom %.3f guarded %.3f | oor rows %.0f headroom %.3f guarded %.3f\n", features.Target(tg), x.n, 100*x.h/x.n, 100*x.g/x.n, x.oor, 100*x.hOOR/x.oor, 100*x.gOOR/x.oor)
	}
}

func TestScratchCov(t *testing.T) {
	if os.Getenv("SCRATCH") == "" {
		t.Skip()
	}
	samples, _ := ReadTraceFile("/work/shared/data/traces/sharegpt-h200.jsonl")
	opts := Options{Fit: trainer.DefaultFitConfig()}.withDefaults()
	tg := features.TPOT
	for seed := 1; seed <= 10; seed++ {
		train, test := splitRows(samples, uint64(seed))
		runOnce(context.Background(), opts, train, func(r *replica) error {
			m := r.modelFor(tg)
			var res []float64
			for i := range test {
				y, ok := test[i].Label(tg)
				if !ok {
					continue
				}
				x := m.Schema().Build(&test[i].Row, nil)
				res = append(res, math.Log(y/m.Predict(x)))
			}
			c, _ := model.NewCalibration("t", res)
			cov := 0
			for _, v := range res {
				if v <= m.Calibration.LogResidual(0.9) {
					cov++
				}
			}
			fmt.Printf("seed %d cal src %s rows %d q90 %.4f q50 %.4f | test q90 %.4f q50 %.4f cov %.1f hold cov %+v\n", seed, m.Calibration.Source, m.Calibration.Rows, m.Calibration.LogResidual(0.9), m.Calibration.LogResidual(0.5), c.LogResidual(0.9), c.LogResidual(0.5), 100*float64(cov)/float64(len(res)), *m.HoldoutCoverage)
			return nil
		})
	}
}

func TestScratchNoHinge(t *testing.T) {
	if os.Getenv("SCRATCH") == "" {
		t.Skip()
	}
	samples, _ := ReadTraceFile("/work/shared/data/traces/sharegpt-h200.jsonl")
	var cols []string
	for _, c := range features.DefaultTTFTColumns {
		if !strings.Contains(c, envOr("DROP", "_over_")) {
			cols = append(cols, c)
		}
	}
	if os.Getenv("KEEP256") != "" {
		cols = append(cols, "effective_input_tokens_over_256")
	}
	o := Options{TTFTColumns: cols}
	rep, _ := Extrapolate(context.Background(), samples, o, 512, 1024)
	WriteTable(os.Stdout, rep)
	rep, _ = Extrapolate(context.Background(), Synthetic(SyntheticOptions{Rows: 4000, Seed: 1}), o, 1024, 2048)
	WriteTable(os.Stdout, rep)
	rep, _ = Split(context.Background(), samples, o, 5)
	WriteTable(os.Stdout, rep)
	if os.Getenv("PREQ") != "" {
		rep, _ = Prequential(context.Background(), samples, o, 100)
		WriteTable(os.Stdout, rep)
	}
}

func TestScratchWindow(t *testing.T) {
	if os.Getenv("SCRATCH") == "" {
		t.Skip()
	}
	samples, _ := ReadTraceFile("/work/shared/data/traces/sharegpt-h200.jsonl")
	for _, w := range []int{200, 300, 1000} {
		for _, q := range []float64{0.5, 0.9} {
			rep, err := Prequential(context.Background(), samples, Options{Quantile: q, Drift: trainer.DriftConfig{Window: w}}, 100)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Printf("window %d q %.2f ttft %.2f cov %.1f | tpot %.2f cov %.1f\n", w, q, rep.Results[0].MAPE, *rep.Results[0].Coverage, rep.Results[3].MAPE, *rep.Results[3].Coverage)
		}
	}
}
