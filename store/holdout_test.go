package store

import (
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
)

// No burst floods the holdout: the samples of one minute take at most a
// 1/HoldoutSpread share of it, however many there are and however many
// uploads they come in, and the rest of their held-out side goes to
// training, so nothing is lost. The share is counted across a restart
// within the minute, and a new minute has its own. Before, one request
// evicted every real holdout row (issue 26).
func TestBurstCannotFloodTheHoldout(t *testing.T) {
	o := testOptions()
	o.HoldoutCapacity, o.HoldoutSpread, o.BucketCapacity = 100, 10, 100000
	now := testEpoch
	o.Now = func() time.Time { return now }
	path := tempPath(t)
	db := openTest(t, path, o)

	// Real traffic over half an hour, about 8 held-out TTFT samples a
	// minute, fills the holdout.
	for m := range 30 {
		now = testEpoch.Add(time.Duration(m) * time.Minute)
		mustAdd(t, db, testSamples(100, uint64(m), time.Duration(m)*time.Minute))
	}
	_, real, err := db.Snapshot(features.TTFT)
	if err != nil {
		t.Fatal(err)
	}
	if len(real) != o.HoldoutCapacity {
		t.Fatalf("holdout %d after real traffic, want it full (%d)", len(real), o.HoldoutCapacity)
	}

	// A burst of 5,000 samples in 50 uploads, in the next minute.
	now = now.Add(time.Minute)
	trainBefore := db.Counts().Train(features.TTFT)
	var held, overflow, sent int
	for u := range 50 {
		burst := testSamples(100, uint64(1000+u), time.Hour+time.Duration(u)*time.Second)
		res := mustAdd(t, db, burst)
		held += res.Holdout[features.TTFT]
		overflow += res.HoldoutOverflow[features.TTFT]
		sent += res.Holdout[features.TTFT] + res.Train[features.TTFT]
	}
	share := o.HoldoutCapacity / o.HoldoutSpread
	if held != share {
		t.Errorf("the burst put %d samples into the holdout, want its minute's share, %d", held, share)
	}
	if got := db.Counts().Train(features.TTFT) - trainBefore; got != sent-held {
		t.Errorf("training gained %d of the burst's samples, want every one not held out (%d; %d of them overflow)", got, sent-held, overflow)
	}
	if kept := common(t, db, real); kept != o.HoldoutCapacity-share {
		t.Errorf("%d real holdout samples kept, want %d", kept, o.HoldoutCapacity-share)
	}

	// A restart within the minute goes on counting it.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, path, o)
	if res := mustAdd(t, db, testSamples(500, 2000, 2*time.Hour)); res.Holdout[features.TTFT] != 0 {
		t.Errorf("after a restart within the burst's minute, %d more held out, want none", res.Holdout[features.TTFT])
	}
	// The next minute has a share of its own.
	now = now.Add(time.Minute)
	if res := mustAdd(t, db, testSamples(500, 3000, 3*time.Hour)); res.Holdout[features.TTFT] != share {
		t.Errorf("the next minute held out %d, want %d", res.Holdout[features.TTFT], share)
	}
}

// common counts the samples of want still in the TTFT holdout.
func common(t *testing.T, db *DB, want []features.Sample) int {
	t.Helper()
	_, holdout, err := db.Snapshot(features.TTFT)
	if err != nil {
		t.Fatal(err)
	}
	in := map[time.Time]bool{}
	for _, s := range holdout {
		in[s.Timestamp] = true
	}
	n := 0
	for _, s := range want {
		if in[s.Timestamp] {
			n++
		}
	}
	return n
}
