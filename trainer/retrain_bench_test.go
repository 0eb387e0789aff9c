package trainer

import (
	"context"
	"math"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/loadgen"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/trainer/fit"
	"github.com/headroomhq/headroom/xgboost"
)

// fullStore opens a store with scheme filled the way a busy service fills
// it: every bucket at capacity and a full holdout, from loadgen's generated
// entries (chat-like prompts over every KV-cache and prefix-cache level).
// With the brief's scheme (KV × prefix, 40 buckets) that is 20,000 training
// samples per target. The store lives in dir; the caller closes it. It
// holds the per-pod targets' samples only (features.PodTargets): the
// generator makes no KV transfers, so a bundle trained on it has no transfer
// model, and the checks below range over the per-pod targets.
func fullStore(b *testing.B, dir, scheme string) *store.DB {
	b.Helper()
	sch, err := store.ParseScheme(scheme)
	if err != nil {
		b.Fatal(err)
	}
	db, err := store.Open(filepath.Join(dir, "samples.db"), store.Options{NoSync: true, Scheme: sch, HoldoutSpread: 1}.ForReplay())
	if err != nil {
		b.Fatal(err)
	}
	g := loadgen.Generator{Seed: 1}
	samples := make([]features.Sample, 0, 10000)
	now := time.Now().UTC()
	capacity := sch.NumBuckets() * store.DefaultBucketCapacity
	full := func() bool {
		c := db.Counts()
		return c.Train(features.TTFT) >= capacity && c.Train(features.TPOT) >= capacity
	}
	// Stop when full, or when the rarest buckets would take far longer to
	// fill than the rest (prompt bands the generator rarely draws).
	for i := int64(0); i < 60*int64(capacity) && !full(); {
		for range cap(samples) {
			s := g.Sample(i)
			i++
			s.Timestamp = now
			samples = append(samples, s)
		}
		if _, err := db.Add(samples); err != nil {
			b.Fatal(err)
		}
		samples = samples[:0]
	}
	c := db.Counts()
	b.Logf("scheme %s: %d buckets, %d/%d training samples (ttft/tpot) of %d each",
		scheme, sch.NumBuckets(), c.Train(features.TTFT), c.Train(features.TPOT), capacity)
	return db
}

// cpuTimes returns this process's CPU time and that of its finished
// children (the xgboost runs), user and system. On a shared machine wall
// time per op grows with every other tenant; CPU time much less, so each
// step reports both.
func cpuTimes() (self, children time.Duration) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) == nil {
		children = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return self, children
}

// loopCPU runs f in b.Loop and reports the CPU per op of the Go process
// (go-cpu-ms/op) and of xgboost (xgboost-cpu-ms/op).
func loopCPU(b *testing.B, f func()) {
	self0, child0 := cpuTimes()
	n := 0
	for b.Loop() {
		f()
		n++
	}
	self, child := cpuTimes()
	b.ReportMetric(float64(self-self0)/float64(n)/1e6, "go-cpu-ms/op")
	b.ReportMetric(float64(child-child0)/float64(n)/1e6, "xgboost-cpu-ms/op")
}

// BenchmarkRetrainFullStore is the wall time of one retrain of a full store
// as the service runs it (both targets at once, default parameters, the
// xgboost CLI; with and without a choice of configurations), then the parts of one target's fit, to show where the time
// goes. "brief" is the product brief's 40-bucket store (20,000 samples per
// target), "default" the store's current default scheme, filled as far as
// the generator's prompts reach. It needs the xgboost binary.
func BenchmarkRetrainFullStore(b *testing.B) {
	xgb := &xgboost.CLI{Binary: "xgboost"}
	if _, err := xgb.Available(); err != nil {
		b.Skip(err)
	}
	ctx := context.Background()
	for _, sc := range []struct{ name, scheme string }{
		{"brief", store.BriefSchemeName},
		{"default", store.DefaultSchemeName},
	} {
		// Filled on first use, so that -bench can pick one scheme; it
		// outlives the sub-benchmark that fills it.
		var db *store.DB
		dir := b.TempDir()
		b.Cleanup(func() {
			if db != nil {
				db.Close()
			}
		})
		// A new trainer's first retrain chooses each target's
		// configuration (select.go) before fitting it, and having no
		// spreads to carry, measures Folds columns with trees: "retrain"
		// is that retrain, the costliest, which only a replay (headroom
		// eval) takes; the service's first models go through
		// first-models, below. "retrain-kept" is the same without the
		// choice.
		for _, kept := range []bool{false, true} {
			name := sc.name + "/retrain"
			if kept {
				name += "-kept"
			}
			b.Run(name, func(b *testing.B) {
				if db == nil {
					db = fullStore(b, dir, sc.scheme)
				}
				loopCPU(b, func() {
					opts := fit.DefaultOptions()
					opts.XGBoost = xgb
					tr, err := New(Config{Fit: opts, BundleDir: b.TempDir(), Select: SelectConfig{Off: kept}}, db)
					if err != nil {
						b.Fatal(err)
					}
					if pub, err := tr.Retrain(ctx); err != nil || pub == nil {
						b.Fatalf("retrain: %v %v", pub, err)
					}
				})
			})
		}
		// The way a new trainer meets a full store in service: Run's
		// first models, a line at once (its extrapolation measured with
		// line-only folds), then the trees, which carry what the line
		// measured and make the first choice of configuration. "retrain"
		// above is a replay's.
		b.Run(sc.name+"/first-models", func(b *testing.B) {
			if db == nil {
				db = fullStore(b, dir, sc.scheme)
			}
			loopCPU(b, func() {
				opts := fit.DefaultOptions()
				opts.XGBoost = xgb
				tr, err := New(Config{Fit: opts, BundleDir: b.TempDir()}, db)
				if err != nil {
					b.Fatal(err)
				}
				tr.firstModels(ctx)
				for _, t := range features.PodTargets {
					if m := tr.Current().Bundle.Target(t); m == nil || m.Kind == model.KindLinear {
						b.Fatalf("first models: %s is %v, want trees", t, m)
					}
				}
			})
		})
		// A retrain of a trainer with a model in service, the service's
		// steady state: it carries what the model in service measured
		// of its extrapolation (fit.SupportOptions.MinInterval; with it 0 it
		// measures Folds columns again), where a fresh trainer's first
		// retrain (above) measures FirstFolds.
		b.Run(sc.name+"/retrain-again", func(b *testing.B) {
			if db == nil {
				db = fullStore(b, dir, sc.scheme)
			}
			opts := fit.DefaultOptions()
			opts.XGBoost = xgb
			tr, err := New(Config{Fit: opts, BundleDir: b.TempDir()}, db)
			if err != nil {
				b.Fatal(err)
			}
			if pub, err := tr.Retrain(ctx); err != nil || pub == nil {
				b.Fatalf("retrain: %v %v", pub, err)
			}
			loopCPU(b, func() {
				forgetTrainedGeneration(tr)
				if pub, err := tr.Retrain(ctx); err != nil || pub == nil {
					b.Fatalf("retrain: %v %v", pub, err)
				}
			})
		})
		// The steady state's retrain that measures Folds columns with
		// trees (fit.SupportOptions.MinInterval 0: every retrain measures), and
		// one that is also due to choose (a drift, which no interval
		// holds back): that one chooses and carries, and measuring waits
		// for the next.
		for _, choose := range []bool{false, true} {
			name := sc.name + "/retrain-measure"
			if choose {
				name = sc.name + "/retrain-choose-measure"
			}
			b.Run(name, func(b *testing.B) {
				if db == nil {
					db = fullStore(b, dir, sc.scheme)
				}
				opts := fit.DefaultOptions()
				opts.XGBoost = xgb
				opts.Support.MinInterval = 0
				tr, err := New(Config{Fit: opts, BundleDir: b.TempDir()}, db)
				if err != nil {
					b.Fatal(err)
				}
				if pub, err := tr.Retrain(ctx); err != nil || pub == nil {
					b.Fatalf("retrain: %v %v", pub, err)
				}
				loopCPU(b, func() {
					forgetTrainedGeneration(tr)
					if choose {
						tr.tuneAfterDrift()
					}
					pub, err := tr.Retrain(ctx)
					if err != nil || pub == nil {
						b.Fatalf("retrain: %v %v", pub, err)
					}
					for _, tg := range features.PodTargets {
						m := pub.Bundle.Target(tg)
						if chose := m.Selection != nil && m.Selection.RetrainsSince == 0; chose != choose {
							b.Fatalf("%s: chose %v, want %v", tg, chose, choose)
						}
						if measured := m.Support != nil && m.Support.Rows > 0; measured == choose {
							b.Fatalf("%s: chose %v and measured %v: want one of them", tg, choose, measured)
						}
					}
				})
			})
		}
		// The first retrain of a trainer upgraded over a bundle written
		// before the widening and the self-tuning: tree models with
		// neither spreads nor a choice. It measures Folds columns with
		// trees and leaves the choice to the next retrain (fitTarget),
		// which chooses and carries, as retrain-choose-measure does.
		b.Run(sc.name+"/upgrade", func(b *testing.B) {
			if db == nil {
				db = fullStore(b, dir, sc.scheme)
			}
			opts := fit.DefaultOptions()
			opts.XGBoost = xgb
			old, err := New(Config{Fit: opts}, db)
			if err != nil {
				b.Fatal(err)
			}
			pub, err := old.Retrain(ctx)
			if err != nil || pub == nil {
				b.Fatalf("retrain: %v %v", pub, err)
			}
			legacy := *pub.Bundle
			for _, m := range []**model.TargetModel{&legacy.TTFT, &legacy.TPOT} {
				c := **m
				c.Support, c.Selection = nil, nil
				*m = &c
			}
			encoded, err := bundle.Encode(&legacy, nil)
			if err != nil {
				b.Fatal(err)
			}
			loopCPU(b, func() {
				bundles := b.TempDir()
				if _, err := bundle.Write(bundles, legacy.Version, encoded); err != nil {
					b.Fatal(err)
				}
				tr, err := New(Config{Fit: opts, BundleDir: bundles}, db)
				if err != nil {
					b.Fatal(err)
				}
				forgetTrainedGeneration(tr)
				pub, err := tr.Retrain(ctx)
				if err != nil || pub == nil {
					b.Fatalf("retrain: %v %v", pub, err)
				}
				for _, tg := range features.PodTargets {
					if m := pub.Bundle.Target(tg); m.Support == nil || m.Support.Rows == 0 || m.Kind == model.KindLinear || m.Selection != nil {
						b.Fatalf("upgrade: %s is %s with support %v and selection %v, want trees with measured spreads and no choice",
							tg, m.Kind, m.Support, m.Selection)
					}
				}
			})
		})
		if db == nil {
			continue // filtered out
		}
		for _, t := range features.PodTargets {
			benchmarkFitParts(b, sc.name+"/"+t.String(), db, t, xgb)
		}
	}
}

// forgetTrainedGeneration makes tr retrain as if samples had arrived: the
// store is full, and a retrain on unchanged samples is skipped.
// Only the per-pod targets forget: the benchmark's samples have no
// transfers.
func forgetTrainedGeneration(tr *Trainer) {
	for _, tg := range tr.targets {
		if l, ok := tg.(*lifecycle[*model.TargetModel]); ok {
			l.mu.Lock()
			l.tried, l.status.TrainedOnGen = false, 0
			l.mu.Unlock()
		}
	}
}

// benchmarkFitParts times the steps of one target's fit on db's samples.
func benchmarkFitParts(b *testing.B, name string, db *store.DB, t features.Target, xgb *xgboost.CLI) {
	ctx := context.Background()
	schema := features.MustSchema(features.DefaultColumns(t)...)
	var train, holdout []features.Sample
	b.Run(name+"/snapshot", func(b *testing.B) {
		loopCPU(b, func() {
			var err error
			if train, holdout, err = db.Snapshot(t); err != nil {
				b.Fatal(err)
			}
		})
	})
	if train == nil {
		var err error
		if train, holdout, err = db.Snapshot(t); err != nil {
			b.Fatal(err)
		}
	}
	trainDS, holdoutDS := fit.BuildDataset(schema, t, train), fit.BuildDataset(schema, t, holdout)
	b.Run(name+"/dataset", func(b *testing.B) {
		loopCPU(b, func() {
			trainDS, holdoutDS = fit.BuildDataset(schema, t, train), fit.BuildDataset(schema, t, holdout)
		})
	})
	// The trees learn log(actual / line); log(actual) minus its mean is a
	// stand-in with the same spread of work for the CLI.
	logY := make([]float64, len(trainDS.Y))
	var mean float64
	for i, y := range trainDS.Y {
		logY[i] = math.Log(y)
		mean += logY[i] / float64(len(logY))
	}
	for i := range logY {
		logY[i] -= mean
	}
	b.Run(name+"/xgboost", func(b *testing.B) {
		loopCPU(b, func() {
			if _, err := xgb.Train(ctx, trainDS.X, logY, 0, xgboost.DefaultParams()); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run(name+"/fit", func(b *testing.B) {
		cfg := fit.DefaultOptions()
		cfg.XGBoost = xgb
		loopCPU(b, func() {
			if _, err := fit.Model(ctx, schema, trainDS, holdoutDS, cfg, fit.Inputs{Quantile: model.DefaultQuantile}); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run(name+"/fit-linear", func(b *testing.B) {
		cfg := fit.DefaultOptions()
		loopCPU(b, func() {
			if _, err := fit.Model(ctx, schema, trainDS, holdoutDS, cfg, fit.Inputs{Quantile: model.DefaultQuantile}); err != nil {
				b.Fatal(err)
			}
		})
	})
}
