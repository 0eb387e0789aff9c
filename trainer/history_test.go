package trainer

import (
	"context"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
)

func TestHistoryKeepsTheNewestOldestFirst(t *testing.T) {
	for _, n := range []int{0, 1, HistoryCapacity - 1, HistoryCapacity, HistoryCapacity + 1, 3*HistoryCapacity + 17} {
		var h history
		base := time.Unix(1_800_000_000, 0).UTC()
		for i := range n {
			h.add(RetrainRecord{Start: base.Add(time.Duration(i) * time.Second)})
		}
		got := h.list()
		if want := min(n, HistoryCapacity); len(got) != want {
			t.Fatalf("%d runs: kept %d, want %d", n, len(got), want)
		}
		for i, r := range got {
			if want := base.Add(time.Duration(n-len(got)+i) * time.Second); !r.Start.Equal(want) {
				t.Fatalf("%d runs: record %d started %v, want %v", n, i, r.Start, want)
			}
		}
	}
}

// TestRetrainRecordsEachRun: every training run lands in History with its
// duration and the new model's holdout figures; a run that finds too few
// samples is no run.
func TestRetrainRecordsEachRun(t *testing.T) {
	f := newFixture(t)
	tr := f.trainer(t, nil)
	f.add(t, 5)
	if _, err := tr.Retrain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h := tr.History(); len(h) != 0 {
		t.Fatalf("no run should be recorded with 5 samples, got %+v", h)
	}
	f.add(t, 400)
	if _, err := tr.Retrain(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := tr.History()
	if len(h) != 1 {
		t.Fatalf("history %+v, want one TTFT run (the samples carry no TPOT)", h)
	}
	r := h[0]
	m := tr.Current().Bundle.Target(features.TTFT)
	if r.Target != features.TTFT || r.Err != "" || r.Kind != model.KindLinear || r.Duration <= 0 ||
		r.TrainRows != m.TrainSamples || r.HoldoutMAPE != m.Holdout.MAPE || r.LinearMAPE != m.HoldoutLinear.MAPE {
		t.Errorf("record %+v does not describe the model in service (%d rows, MAPE %v)", r, m.TrainSamples, m.Holdout.MAPE)
	}
	if r.HasLive {
		t.Error("live MAPE reported before any sample was compared with a prediction")
	}
}
