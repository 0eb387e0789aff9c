package store

import (
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
)

func TestFlush(t *testing.T) {
	tests := []struct {
		name           string
		train, holdout bool
		targets        []features.Target
		// which (target, side) pairs are emptied
		emptied [numStreams][2]bool
	}{
		{"everything", true, true, nil, [numStreams][2]bool{{true, true}, {true, true}}},
		{"training only", true, false, nil, [numStreams][2]bool{{true, false}, {true, false}}},
		{"holdout only", false, true, nil, [numStreams][2]bool{{false, true}, {false, true}}},
		{"ttft only", true, true, []features.Target{features.TTFT}, [numStreams][2]bool{{true, true}, {false, false}}},
		{"tpot training", true, false, []features.Target{features.TPOT}, [numStreams][2]bool{{false, false}, {true, false}}},
		{"nothing", false, false, nil, [numStreams][2]bool{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := tempPath(t)
			db := openTest(t, path, testOptions())
			mustAdd(t, db, testSamples(2000, 1, 0))
			before := db.Counts()
			var gens [numStreams]uint64
			for _, tg := range features.PodTargets {
				gens[tg] = db.Generation(tg)
			}
			res, err := db.Flush(tc.train, tc.holdout, tc.targets...)
			if err != nil {
				t.Fatal(err)
			}
			for _, tg := range features.PodTargets {
				wantTrain, wantHoldout := 0, 0
				if tc.emptied[tg][0] {
					wantTrain = before.Train(tg)
				}
				if tc.emptied[tg][1] {
					wantHoldout = before.Holdout(tg)
				}
				if res.Train[tg] != wantTrain || res.Holdout[tg] != wantHoldout {
					t.Errorf("%s: flushed %d/%d, want %d/%d", tg, res.Train[tg], res.Holdout[tg], wantTrain, wantHoldout)
				}
				c := db.Counts()
				if c.Train(tg) != before.Train(tg)-wantTrain || c.Holdout(tg) != before.Holdout(tg)-wantHoldout {
					t.Errorf("%s: counts %d/%d after flush", tg, c.Train(tg), c.Holdout(tg))
				}
				train, holdout, err := db.Snapshot(tg)
				if err != nil || len(train) != c.Train(tg) || len(holdout) != c.Holdout(tg) {
					t.Errorf("%s: snapshot %d/%d (err %v) disagrees with counts", tg, len(train), len(holdout), err)
				}
				if wantTrain > 0 && len(db.BucketCounts(tg)) != 0 {
					t.Errorf("%s: bucket counts %v after flushing training", tg, db.BucketCounts(tg))
				}
				changed := wantTrain+wantHoldout > 0
				if (db.Generation(tg) > gens[tg]) != changed {
					t.Errorf("%s: generation %d → %d, changed = %v", tg, gens[tg], db.Generation(tg), changed)
				}
			}

			// The flush is durable and the store keeps working.
			after := db.Counts()
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db = openTest(t, path, testOptions())
			if db.Counts() != after {
				t.Errorf("counts after reopen %+v, want %+v", db.Counts(), after)
			}
			mustAdd(t, db, testSamples(100, 2, time.Hour))
		})
	}
}

func TestFlushEmptyAndUnknown(t *testing.T) {
	db := openTest(t, tempPath(t), testOptions())
	before := db.commits.Load()
	res, err := db.Flush(true, true)
	if err != nil || res != (FlushResult{}) {
		t.Errorf("flush of an empty store = %+v, %v", res, err)
	}
	if db.commits.Load() != before || db.Generation(features.TTFT) != 0 {
		t.Error("flushing nothing wrote to the file")
	}
	if _, err := db.Flush(true, true, features.Target(-1)); err == nil {
		t.Error("Flush of an unknown target succeeded")
	}
}
